// The worker model (common/http/io_workers.h) and what is built on it: connections spread over
// the workers and stay on one, and a client call started on a worker answers on that worker.
#include <pthread.h>

#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include "common/http/async_client.h"
#include "common/http/client.h"
#include "common/http/io_workers.h"
#include "common/http/stream_server.h"
#include "tests/common/http_test_util.h"

namespace llmd::http {
namespace {

// Runs `fn` on worker `w` and waits for its result.
template <typename Fn>
auto on_worker(IoWorkers& workers, std::size_t w, Fn fn) {
  std::promise<decltype(fn())> result;
  boost::asio::post(workers.at(w), [&] { result.set_value(fn()); });
  return result.get_future().get();
}

std::string thread_name() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

TEST(IoWorkers, EachWorkerIsOneNamedThreadThatKnowsItself) {
  IoWorkers workers(2, "test-worker");
  EXPECT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers.current(), IoWorkers::npos) << "the test's thread is not a worker";
  EXPECT_EQ(IoWorkers::current_context(), nullptr);
  workers.start();
  workers.start();  // idempotent
  for (std::size_t w = 0; w < 2; ++w) {
    EXPECT_EQ(on_worker(workers, w, [&] { return workers.current(); }), w);
    EXPECT_EQ(on_worker(workers, w, [] { return IoWorkers::current_context(); }), &workers.at(w));
    EXPECT_EQ(on_worker(workers, w, [] { return thread_name(); }),
              "test-worker-" + std::to_string(w));
  }
  // Another set of workers does not count this thread as its own.
  IoWorkers other(1, "other");
  EXPECT_EQ(on_worker(workers, 1, [&] { return other.current(); }), IoWorkers::npos);
  // A worker runs its handlers one at a time on its one thread.
  std::set<std::thread::id> threads;
  for (int i = 0; i < 20; ++i) {
    threads.insert(on_worker(workers, 0, [] { return std::this_thread::get_id(); }));
  }
  EXPECT_EQ(threads.size(), 1u);
  workers.stop();
  workers.stop();  // idempotent
  EXPECT_FALSE(workers.running());
}

// Connections go to the worker with the fewest; each is served on its worker's thread for all
// of its requests.
TEST(IoWorkers, AServerSpreadsConnectionsOverItsWorkersAndKeepsEachOnOne) {
  IoWorkers workers(2, "srv-worker");
  std::mutex mu;
  std::vector<std::size_t> seen;  // the worker of each request, in arrival order
  StreamServerOptions o;
  o.host = "127.0.0.1";
  StreamServer server(
      o,
      [&](std::size_t, Request&&, ResponseStreamPtr stream) {
        {
          std::lock_guard lock(mu);
          seen.push_back(workers.current());
        }
        stream->respond(Response::text(200, "ok"));
      },
      workers);
  const uint16_t port = server.port(server.listen(0));
  std::thread runner([&] { server.run(false); });
  // Stopped and joined whatever the assertions below do.
  struct StopOnExit {
    StopOnExit(StreamServer& s, std::thread& r) : server(s), runner(r) {}
    ~StopOnExit() {
      server.stop(std::chrono::milliseconds(0));
      runner.join();
    }
    StreamServer& server;
    std::thread& runner;
  };
  std::optional<StopOnExit> stop_on_exit;
  stop_on_exit.emplace(server, runner);
  {
    // Two kept-alive connections, used in turn: the second lands on the other worker and each
    // stays where it landed.
    HttpClient first("127.0.0.1", port, std::chrono::seconds(5));
    HttpClient second("127.0.0.1", port, std::chrono::seconds(5));
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(first.get("/").status, 200);
      ASSERT_EQ(second.get("/").status, 200);
    }
  }
  stop_on_exit.reset();
  EXPECT_TRUE(workers.running()) << "the owner's workers outlive the server's run()";
  ASSERT_EQ(seen.size(), 6u);
  for (std::size_t i = 0; i < 6; i += 2) {
    EXPECT_EQ(seen[i], seen[0]) << "the first connection moved";
    EXPECT_EQ(seen[i + 1], seen[1]) << "the second connection moved";
  }
  EXPECT_NE(seen[0], seen[1]) << "both connections on one worker";
  EXPECT_NE(seen[0], IoWorkers::npos);
}

// With on_caller_worker, a call made on a worker answers on that worker (no other thread is
// woken); from any other thread it answers on the client's own thread, as before.
TEST(IoWorkers, AClientCallStartedOnAWorkerAnswersOnThatWorker) {
  testing::RunningServer server(testing::local_options(),
                                [](Request&) { return Response::text(200, "pong"); });
  Url url;
  url.host = "127.0.0.1";
  url.port = server.port();
  IoWorkers workers(2, "call-worker");
  workers.start();
  AsyncHttpClient::Options opts;
  opts.on_caller_worker = true;
  AsyncHttpClient client(std::vector<Url>{url}, opts);
  struct Answer {
    int status;
    std::thread::id thread;
  };
  auto call_from = [&](auto post) {
    std::promise<Answer> answer;
    post([&] {
      client.request(0, "GET", "/ping", {}, std::chrono::seconds(5), [&](AsyncResponse r) {
        answer.set_value({r.status, std::this_thread::get_id()});
      });
    });
    return answer.get_future().get();
  };
  for (std::size_t w = 0; w < 2; ++w) {
    const auto worker_thread = on_worker(workers, w, [] { return std::this_thread::get_id(); });
    for (int i = 0; i < 3; ++i) {
      const Answer a = call_from([&](auto fn) { boost::asio::post(workers.at(w), fn); });
      EXPECT_EQ(a.status, 200);
      EXPECT_EQ(a.thread, worker_thread) << "worker " << w << ", call " << i;
    }
  }
  const Answer elsewhere = call_from([](auto fn) { fn(); });
  EXPECT_EQ(elsewhere.status, 200);
  EXPECT_NE(elsewhere.thread, std::this_thread::get_id());
  EXPECT_NE(elsewhere.thread, on_worker(workers, 0, [] { return std::this_thread::get_id(); }));
  EXPECT_NE(elsewhere.thread, on_worker(workers, 1, [] { return std::this_thread::get_id(); }));
}

}  // namespace
}  // namespace llmd::http
