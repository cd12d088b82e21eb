#include "epp/proxy/upstream_pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
using Clock = UpstreamPool::Clock;
const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);

// A connected socket pair standing in for a connection to a pod: [0] is ours, [1] the pod's.
std::array<int, 2> connection() {
  std::array<int, 2> fds{-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds.data()), 0);
  return fds;
}

bool is_open_descriptor(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(UpstreamPool, LendsTheMostRecentIdleConnectionOfThatPod) {
  UpstreamPool pool;
  EXPECT_EQ(pool.take("a:1", kT0).fd, -1);
  auto first = connection(), second = connection();
  pool.give_back("a:1", {first[0], false}, kT0);
  pool.give_back("a:1", {second[0], true}, kT0 + 1ms);
  EXPECT_EQ(pool.idle(), 2u);
  EXPECT_EQ(pool.take("b:1", kT0).fd, -1) << "another pod's connections are not lent";
  auto c = pool.take("a:1", kT0 + 2ms);
  EXPECT_EQ(c.fd, second[0]);
  EXPECT_TRUE(c.ipv6);
  EXPECT_EQ(pool.take("a:1", kT0 + 2ms).fd, first[0]);
  EXPECT_EQ(pool.idle(), 0u);
  for (int fd : {first[0], first[1], second[0], second[1]}) {
    ::close(fd);
  }
}

TEST(UpstreamPool, ClosedExpiredAndChattyConnectionsAreNeverLent) {
  UpstreamPool::Options o;
  o.idle_timeout = 4s;
  UpstreamPool pool(o);
  auto closed = connection(), old = connection(), chatty = connection();
  ::close(closed[1]);                          // the pod closed it
  ASSERT_EQ(::write(chatty[1], "x", 1), 1);    // the pod wrote something unasked
  pool.give_back("a:1", {old[0], false}, kT0);
  pool.give_back("a:1", {closed[0], false}, kT0 + 3s);
  pool.give_back("a:1", {chatty[0], false}, kT0 + 3s);
  EXPECT_EQ(pool.take("a:1", kT0 + 4500ms).fd, -1);
  EXPECT_EQ(pool.idle(), 0u);
  for (int fd : {closed[0], old[0], chatty[0]}) {
    EXPECT_FALSE(is_open_descriptor(fd)) << "closed by the pool";
  }
  ::close(old[1]);
  ::close(chatty[1]);
}

TEST(UpstreamPool, LimitsCloseWhatItCannotKeepAndIdlePodsAreSwept) {
  UpstreamPool::Options o;
  o.max_idle_per_pod = 1;
  o.max_idle = 2;
  o.idle_timeout = 4s;
  UpstreamPool pool(o);
  auto a1 = connection(), a2 = connection(), b = connection(), c = connection();
  pool.give_back("a:1", {a1[0], false}, kT0);
  pool.give_back("a:1", {a2[0], false}, kT0);  // over the per-pod limit
  pool.give_back("b:1", {b[0], false}, kT0);
  pool.give_back("c:1", {c[0], false}, kT0);  // over the total
  EXPECT_EQ(pool.idle(), 2u);
  EXPECT_FALSE(is_open_descriptor(a2[0]));
  EXPECT_FALSE(is_open_descriptor(c[0]));
  // Traffic to another pod later sweeps the connections that idled past the timeout.
  auto d = connection();
  pool.give_back("d:1", {d[0], false}, kT0 + 5s);
  EXPECT_EQ(pool.idle(), 1u);
  EXPECT_FALSE(is_open_descriptor(a1[0]));
  EXPECT_FALSE(is_open_descriptor(b[0]));
  for (int fd : {a1[1], a2[1], b[1], c[1], d[1]}) {
    ::close(fd);
  }
}

}  // namespace
}  // namespace llmd::epp
