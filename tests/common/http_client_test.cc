#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "common/http/async_client.h"
#include "common/http/client.h"
#include "common/http/descriptor_budget.h"
#include "tests/common/http_test_util.h"

namespace llmd::http {
namespace {

using testing::local_options;
using testing::RunningServer;

TEST(HttpClientParseUrl, AcceptsHttpForms) {
  auto u = parse_url("http://localhost:8000");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->port, 8000);
  EXPECT_EQ(u->base_path, "");

  u = parse_url("http://training-server");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "training-server");
  EXPECT_EQ(u->port, 80);

  u = parse_url("http://10.0.0.1:9000/base/path/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "10.0.0.1");
  EXPECT_EQ(u->port, 9000);
  EXPECT_EQ(u->base_path, "/base/path");

  u = parse_url("http://h:1/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->base_path, "");

  u = parse_url("http://[::1]:8080");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 8080);
}

TEST(HttpClientParseUrl, RejectsOtherSchemesAndGarbage) {
  for (const char* bad :
       {"https://host:443", "ftp://host", "host:8000", "", "http://", "http://:80",
        "http://host:", "http://host:0", "http://host:70000", "http://host:12ab",
        "http://host:80?x=1", "http://user@host", "http://ho st", "http://[::1"}) {
    EXPECT_FALSE(parse_url(bad).has_value()) << bad;
  }
}

// Accepts exactly one connection and answers every request on it, so a client that opened a
// second connection would hang in the backlog and time out.
class OneConnectionServer {
 public:
  OneConnectionServer() {
    std::tie(listen_fd_, port_) = testing::listen_on_loopback();
    thread_ = std::thread([this] { serve(); });
  }
  ~OneConnectionServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  int served() const { return served_; }
  // True when nobody else is waiting in the accept queue.
  bool backlog_empty() {
    ::fcntl(listen_fd_, F_SETFL, O_NONBLOCK);
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd >= 0) {
      ::close(fd);
    }
    return fd < 0;
  }

 private:
  void serve() {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) {
      return;
    }
    std::string buffer;
    char chunk[4096];
    while (true) {
      const auto end = buffer.find("\r\n\r\n");
      if (end != std::string::npos) {
        buffer.erase(0, end + 4);
        ++served_;
        const std::string res = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        ::send(fd, res.data(), res.size(), MSG_NOSIGNAL);
        continue;
      }
      const auto n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) {
        break;
      }
      buffer.append(chunk, static_cast<std::size_t>(n));
    }
    ::close(fd);
  }

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> served_{0};
  std::thread thread_;
};

TEST(HttpClient, ReusesOneConnectionForManyRequests) {
  OneConnectionServer server;
  {
    HttpClient client("127.0.0.1", server.port(), std::chrono::seconds(5));
    for (int i = 0; i < 20; ++i) {
      const auto res = client.get("/x");
      ASSERT_EQ(res.status, 200) << res.error;
      EXPECT_EQ(res.body, "ok");
    }
    EXPECT_TRUE(server.backlog_empty());
  }
  EXPECT_EQ(server.served(), 20);
}

TEST(HttpClient, ConnectionRefusedIsStatusZeroWithError) {
  uint16_t port = 0;
  {
    RunningServer srv(local_options(), [](Request&) { return Response::text(200, "x"); });
    port = srv.port();
  }
  HttpClient client("127.0.0.1", port, std::chrono::seconds(2));
  const auto res = client.get("/");
  EXPECT_EQ(res.status, 0);
  EXPECT_FALSE(res.error.empty());
}

// Answers "fine" at once, except /slow, which waits until release() (at most 10 s).
class SlowPathServer {
 public:
  SlowPathServer()
      : released_(gate_.get_future().share()), srv_(local_options(), [this](Request& r) {
          if (r.path == "/slow") {
            released_.wait_for(std::chrono::seconds(10));
          }
          return Response::text(200, "fine");
        }) {}
  ~SlowPathServer() { release(); }
  uint16_t port() const { return srv_.port(); }
  void release() {
    if (!done_) {
      done_ = true;
      gate_.set_value();
    }
  }

 private:
  std::promise<void> gate_;
  std::shared_future<void> released_;
  bool done_ = false;
  RunningServer srv_;
};

TEST(HttpClient, TimeoutIsStatusZeroAndClientRecovers) {
  SlowPathServer srv;
  HttpClient client("127.0.0.1", srv.port(), std::chrono::milliseconds(200));
  const auto slow = client.get("/slow");
  srv.release();
  EXPECT_EQ(slow.status, 0);
  EXPECT_FALSE(slow.error.empty());
  client.set_timeout(std::chrono::seconds(5));
  const auto fast = client.get("/fast");
  EXPECT_EQ(fast.status, 200) << fast.error;
  EXPECT_EQ(fast.body, "fine");
}

}  // namespace
}  // namespace llmd::http

namespace llmd::http {
namespace {

// Out of descriptors (EMFILE) a client is a failed request the caller can retry, never an
// exception from a constructor on a background thread (that aborted the EPP and the predictor).
TEST(HttpClient, OutOfDescriptorsIsAFailedRequestNotAnException) {
  RunningServer srv(testing::local_options(), [](Request&) { return Response::text(200, "x"); });
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  // The lowest free descriptor number becomes the limit: nothing new can be opened.
  const int probe = ::dup(0);
  ASSERT_GE(probe, 0);
  ::close(probe);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(probe);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  ClientResponse res;
  {
    HttpClient client("127.0.0.1", srv.port(), std::chrono::seconds(2));
    res = client.get("/");
  }
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(res.status, 0);
  EXPECT_NE(res.error.find("Too many open files"), std::string::npos) << res.error;
  HttpClient again("127.0.0.1", srv.port(), std::chrono::seconds(2));
  EXPECT_EQ(again.get("/").status, 200) << "fine once descriptors are free";
}

// The deadline covers the whole exchange (one timer, not one per read): a pod that accepts and
// never answers is a timeout, reported as one, and the client serves the next request.
TEST(AsyncHttpClient, AnUnansweredRequestTimesOutAndTheClientServesTheNext) {
  SlowPathServer srv;
  AsyncHttpClient client(std::vector<Url>{});
  Url url;
  url.host = "127.0.0.1";
  url.port = srv.port();
  auto call = [&](const std::string& path, std::chrono::milliseconds timeout) {
    std::promise<AsyncResponse> done;
    client.request(url, "GET", path, {}, timeout,
                   [&done](AsyncResponse r) { done.set_value(std::move(r)); });
    return done.get_future().get();
  };
  const auto start = std::chrono::steady_clock::now();
  const AsyncResponse slow = call("/slow", std::chrono::milliseconds(200));
  const auto waited = std::chrono::steady_clock::now() - start;
  srv.release();
  EXPECT_EQ(slow.status, 0);
  EXPECT_TRUE(slow.timed_out) << slow.error;
  EXPECT_NE(slow.error.find("timeout"), std::string::npos) << slow.error;
  EXPECT_LT(waited, std::chrono::seconds(5)) << "the deadline did not end the read";
  for (int i = 0; i < 3; ++i) {
    const AsyncResponse fast = call("/fast", std::chrono::seconds(5));
    EXPECT_EQ(fast.status, 200) << fast.error;
    EXPECT_EQ(fast.body, "fine");
  }
}

TEST(AsyncHttpClient, TargetsNamedByUrlKeepTheirConnectionAlive) {
  OneConnectionServer server;
  {
    AsyncHttpClient client(std::vector<Url>{});
    Url url;
    url.host = "127.0.0.1";
    url.port = server.port();
    for (int i = 0; i < 10; ++i) {
      std::promise<AsyncResponse> done;
      client.request(url, "GET", "/m", {}, std::chrono::seconds(5),
                     [&done](AsyncResponse r) { done.set_value(std::move(r)); });
      const AsyncResponse r = done.get_future().get();
      ASSERT_EQ(r.status, 200) << r.error;
      EXPECT_EQ(r.body, "ok");
    }
    EXPECT_TRUE(server.backlog_empty()) << "one connection served all ten";
  }
  EXPECT_EQ(server.served(), 10);
}

// Tasks run on the client's I/O thread in the order they fall due (a task may re-arm itself),
// and the destructor drops those not yet due: it neither waits for them nor runs them.
TEST(AsyncHttpClient, PostAtRunsTasksWhenDueAndTheDestructorDropsTheRest) {
  std::mutex mu;
  std::vector<int> ran;
  std::promise<void> third;
  std::atomic<bool> late_ran{false};
  const auto now = std::chrono::steady_clock::now();
  const auto started = now;
  {
    AsyncHttpClient client(std::vector<Url>{});
    auto record = [&](int i) {
      std::lock_guard lock(mu);
      ran.push_back(i);
    };
    client.post_at(now + std::chrono::milliseconds(30), [&] { record(2); });
    client.post_at(now + std::chrono::milliseconds(10), [&] {
      record(1);
      // From the I/O thread: armed inline, runs after the 30-ms task.
      client.post_at(now + std::chrono::milliseconds(40), [&] {
        record(3);
        third.set_value();
      });
    });
    client.post([&] { record(0); });
    client.post_at(now + std::chrono::hours(1), [&] { late_ran = true; });
    third.get_future().wait();
  }
  EXPECT_FALSE(late_ran.load());
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::minutes(30))
      << "the destructor did not wait for the hour-long timer";
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3}));
}

TEST(DescriptorBudget, KeepsAReserveAndNeverGivesMoreThanItHas) {
  EXPECT_EQ(DescriptorBudget::capacity_for(1024), 896u);
  EXPECT_EQ(DescriptorBudget::capacity_for(64), 48u);
  EXPECT_EQ(DescriptorBudget::capacity_for(1 << 20), (1u << 20) - 1024u);
  EXPECT_EQ(DescriptorBudget::capacity_for(10), 1u);
  EXPECT_EQ(DescriptorBudget::capacity_for(256, 36), 256u - 36u - 32u) << "what is open is kept";
  DescriptorBudget budget(5);
  EXPECT_TRUE(budget.try_take(2));
  EXPECT_TRUE(budget.try_take(2));
  EXPECT_FALSE(budget.try_take(2));
  EXPECT_TRUE(budget.try_take(1));
  EXPECT_EQ(budget.held(), 5u);
  budget.give_back(2);
  EXPECT_TRUE(budget.try_take(0));
  EXPECT_TRUE(budget.try_take(2));
  EXPECT_FALSE(budget.try_take(6));
}

}  // namespace
}  // namespace llmd::http
