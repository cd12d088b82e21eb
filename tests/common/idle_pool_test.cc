// The keep-alive pool's rules (which connection is lent, what is never lent, the limits and the
// sweep), on socket pairs standing in for connections, with time passed in.
#include "common/http/idle_pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <utility>

namespace llmd::http {
namespace {

using namespace std::chrono_literals;
using Clock = IdlePool<int>::Clock;
const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);

// Owns a descriptor as a pooled connection owns its socket: destroying it closes it.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// A connected socket pair standing in for a connection: [0] is ours, [1] the server's.
std::array<int, 2> connection() {
  std::array<int, 2> fds{-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds.data()), 0);
  return fds;
}

bool is_open_descriptor(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

const auto kAny = [](const Fd&) { return true; };
const auto kStillOpen = [](const Fd& c) { return still_open(c.get()); };

TEST(IdlePool, LendsTheMostRecentIdleConnectionOfThatOrigin) {
  IdlePool<Fd> pool({});
  Fd got;
  EXPECT_FALSE(pool.take("a:1", kT0, kAny, got));
  auto first = connection(), second = connection();
  pool.give_back("a:1", Fd(first[0]), kT0);
  pool.give_back("a:1", Fd(second[0]), kT0 + 1ms);
  EXPECT_EQ(pool.idle(), 2u);
  EXPECT_FALSE(pool.take("b:1", kT0, kAny, got)) << "another origin's connections are not lent";
  ASSERT_TRUE(pool.take("a:1", kT0 + 2ms, kAny, got));
  EXPECT_EQ(got.get(), second[0]);
  ASSERT_TRUE(pool.take("a:1", kT0 + 2ms, kAny, got));
  EXPECT_EQ(got.get(), first[0]);
  EXPECT_FALSE(is_open_descriptor(second[0])) << "the one lent before was released by `got`";
  EXPECT_EQ(pool.idle(), 0u);
  for (int fd : {first[1], second[1]}) {
    ::close(fd);
  }
}

TEST(IdlePool, ClosedExpiredAndChattyConnectionsAreNeverLent) {
  IdlePool<Fd>::Options o;
  o.idle_timeout = 4s;
  IdlePool<Fd> pool(o);
  auto closed = connection(), old = connection(), chatty = connection(), fine = connection();
  ::close(closed[1]);                        // the server closed it
  ASSERT_EQ(::write(chatty[1], "x", 1), 1);  // the server wrote something unasked
  pool.give_back("a:1", Fd(old[0]), kT0);
  pool.give_back("a:1", Fd(fine[0]), kT0 + 3s);
  pool.give_back("a:1", Fd(closed[0]), kT0 + 3s);
  pool.give_back("a:1", Fd(chatty[0]), kT0 + 3s);
  Fd got;
  ASSERT_TRUE(pool.take("a:1", kT0 + 4500ms, kStillOpen, got));
  EXPECT_EQ(got.get(), fine[0]);
  EXPECT_FALSE(pool.take("a:1", kT0 + 4500ms, kStillOpen, got));
  EXPECT_EQ(pool.idle(), 0u);
  for (int fd : {closed[0], old[0], chatty[0]}) {
    EXPECT_FALSE(is_open_descriptor(fd)) << "closed by the pool";
  }
  for (int fd : {old[1], chatty[1], fine[1]}) {
    ::close(fd);
  }
}

TEST(IdlePool, LimitsCloseWhatItCannotKeepAndIdleOriginsAreSwept) {
  IdlePool<Fd>::Options o;
  o.max_idle_per_origin = 1;
  o.max_idle = 2;
  o.idle_timeout = 4s;
  IdlePool<Fd> pool(o);
  auto a1 = connection(), a2 = connection(), b = connection(), c = connection();
  pool.give_back("a:1", Fd(a1[0]), kT0);
  pool.give_back("a:1", Fd(a2[0]), kT0);  // over the per-origin limit
  pool.give_back("b:1", Fd(b[0]), kT0);
  pool.give_back("c:1", Fd(c[0]), kT0);  // over the total
  EXPECT_EQ(pool.idle(), 2u);
  EXPECT_FALSE(is_open_descriptor(a2[0]));
  EXPECT_FALSE(is_open_descriptor(c[0]));
  // Traffic to another origin later sweeps the connections that idled past the timeout.
  auto d = connection();
  pool.give_back("d:1", Fd(d[0]), kT0 + 5s);
  EXPECT_EQ(pool.idle(), 1u);
  EXPECT_FALSE(is_open_descriptor(a1[0]));
  EXPECT_FALSE(is_open_descriptor(b[0]));
  for (int fd : {a1[1], a2[1], b[1], c[1], d[1]}) {
    ::close(fd);
  }
}

TEST(IdlePool, AStoppedPoolClosesWhatComesBack) {
  IdlePool<Fd> pool({});
  auto a = connection(), b = connection();
  pool.give_back("a:1", Fd(a[0]), kT0);
  pool.clear(/*for_good=*/true);
  EXPECT_FALSE(is_open_descriptor(a[0]));
  pool.give_back("a:1", Fd(b[0]), kT0);
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_FALSE(is_open_descriptor(b[0]));
  ::close(a[1]);
  ::close(b[1]);
}

}  // namespace
}  // namespace llmd::http
