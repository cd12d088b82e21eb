// The proxy's pod side in process: the real ProxyServer forwarding to a scripted pod on
// loopback, a scripted scheduling port picking it. What the client core must keep for the
// proxy: a client that does not read holds the pod back (the proxy stops reading it), every
// byte still arrives, and the connection to the pod is kept alive for the next request.
#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "epp/datastore/pod_registry.h"
#include "epp/proxy/proxy_server.h"
#include "epp/request/sse_scanner.h"
#include "tests/common/http_test_util.h"

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Picks the registry's pods in order.
class FirstPodPort final : public SchedulingPort {
 public:
  explicit FirstPodPort(PodRegistry& registry) : registry_(registry) {}
  SchedulingGenerationPtr generation() override { return generation_; }
  Route route(const SchedulingRequest&, const SchedulingGeneration&) override { return {}; }
  void pick_async(const SchedulingRequest&, const Route&, const SchedulingGeneration&, Rng&, Resume,
                  std::function<void(PickResult)> done) override {
    PickResult r;
    r.ranked = registry_.candidates(Clock::now());
    done(std::move(r));
  }
  void estimate_service_ms_async(const SchedulingRequest&, int64_t, Resume,
                                 std::function<void(double)> done) override {
    done(0);
  }

 private:
  PodRegistry& registry_;
  SchedulingGenerationPtr generation_ = std::make_shared<const SchedulingGeneration>();
};

struct NullSink final : CompletionSink {
  void on_completed(const CompletedRequest&) override {}
};

// A pod on loopback: takes one connection at a time and calls `answer(fd)` for each request
// read on it; false from `answer` ends the connection.
class LoopbackPod {
 public:
  explicit LoopbackPod(std::function<bool(int)> answer) : answer_(std::move(answer)) {
    std::tie(listen_fd_, port_) = http::testing::listen_on_loopback();
    thread_ = std::thread([this] { serve(); });
  }
  ~LoopbackPod() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_; }
  int requests() const { return requests_; }

 private:
  void serve() {
    while (true) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        return;
      }
      ++connections_;
      while (http::testing::read_request(fd) && (++requests_, answer_(fd))) {
      }
      ::close(fd);
    }
  }
  const std::function<bool(int)> answer_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> connections_{0};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

// A pod that answers each request on a connection with a stream of `events` SSE events of
// `event_bytes` each (then [DONE]), counting what its socket took.
class StreamingPod {
 public:
  StreamingPod(std::size_t events, std::size_t event_bytes)
      : events_(events), event_bytes_(event_bytes) {}
  std::string address() const { return pod_.address(); }
  std::size_t sent() const { return sent_; }
  int connections() const { return pod_.connections(); }
  int requests() const { return pod_.requests(); }
  std::size_t body_bytes() const { return events_ * (event_bytes_ + kFrame) + kDone.size(); }
  void set_events(std::size_t events) { events_ = events; }

 private:
  static constexpr std::string_view kDone = "data: [DONE]\n\n";
  static constexpr std::size_t kFrame = 8;  // "data: " + "\n\n"

  bool send_all(int fd, std::string_view data) { return http::testing::send_all(fd, data, &sent_); }
  bool answer(int fd) {
    const std::string event = "data: " + std::string(event_bytes_, 'x') + "\n\n";
    const std::string length = std::to_string(body_bytes());
    if (!send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
                          length + "\r\n\r\n")) {
      return false;
    }
    for (std::size_t i = 0; i < events_; ++i) {
      if (!send_all(fd, event)) {
        return false;
      }
    }
    return send_all(fd, kDone);
  }

  std::atomic<std::size_t> events_;
  const std::size_t event_bytes_;
  std::atomic<std::size_t> sent_{0};
  LoopbackPod pod_{[this](int fd) { return answer(fd); }};  // last: serves the members above
};

// A pod that answers every request with the same raw bytes, then closes the connection if
// `close_after` (a body cut short when the bytes announce more than they hold).
class RawAnswerPod {
 public:
  RawAnswerPod(std::string answer, bool close_after)
      : answer_(std::move(answer)), close_after_(close_after) {}
  std::string address() const { return pod_.address(); }

 private:
  const std::string answer_;
  const bool close_after_;
  LoopbackPod pod_{
      [this](int fd) { return http::testing::send_all(fd, answer_) && !close_after_; }};
};

// The real proxy in front of the pod at `address`, which the scheduling port always picks.
class ProxyInFrontOf {
 public:
  explicit ProxyInFrontOf(const std::string& address) : port_(registry_) {
    registry_.set_pods({{"a", address, {}}});
    PodMetrics m;
    m.scraped_at = Clock::now() + 1h;  // fresh for the whole test
    registry_.update_metrics("a", m);
    ProxyOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.default_prediction = false;
    proxy_ = std::make_unique<ProxyServer>(o, port_, registry_, sink_);
    proxy_->start();
    thread_ = std::thread([this] { proxy_->run(); });
  }
  ~ProxyInFrontOf() {
    proxy_->stop();
    thread_.join();
  }
  uint16_t port() const { return proxy_->port(); }
  std::size_t idle_upstream_connections() const { return proxy_->idle_upstream_connections(); }

 private:
  PodRegistry registry_;
  FirstPodPort port_;
  NullSink sink_;
  std::unique_ptr<ProxyServer> proxy_;
  std::thread thread_;
};

std::string completion_request() {
  const std::string body = R"({"model":"m","prompt":"hi","max_tokens":4})";
  return "POST /v1/completions HTTP/1.1\r\nHost: epp\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(ProxyWholeAnswer, ASmallBodyOfKnownLengthIsAnsweredWholeWithItsLength) {
  const std::string body = R"({"id":"x","object":"text_completion","choices":[]})";
  RawAnswerPod pod(
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nx-pod-header: kept\r\n"
      "Content-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body,
      false);
  ProxyInFrontOf proxy(pod.address());
  http::testing::RawSocket client(proxy.port(), 30);
  for (int i = 0; i < 2; ++i) {  // the client's connection stays usable after a whole answer
    ASSERT_TRUE(client.send_all(completion_request()));
    const std::optional<std::string> got = client.read_response();
    ASSERT_TRUE(got) << "request " << i;
    EXPECT_NE(got->find("Content-Length: " + std::to_string(body.size()) + "\r\n"),
              std::string::npos)
        << *got;
    EXPECT_EQ(got->find("Transfer-Encoding"), std::string::npos) << *got;
    EXPECT_NE(got->find("x-pod-header: kept\r\n"), std::string::npos) << *got;
    EXPECT_NE(got->find("x-gateway-destination-endpoint: " + pod.address()), std::string::npos)
        << *got;
    EXPECT_TRUE(got->ends_with("\r\n\r\n" + body)) << *got;
  }
}

TEST(ProxyWholeAnswer, ABodyCutShortOfItsLengthReachesTheClientAsAnIncompleteAnswer) {
  RawAnswerPod pod(
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
      "\r\n{\"id\":\"x\",",
      true);
  ProxyInFrontOf proxy(pod.address());
  http::testing::RawSocket client(proxy.port(), 30);
  ASSERT_TRUE(client.send_all(completion_request()));
  ASSERT_TRUE(client.wait_for_close() || !client.buffered().empty());
  const std::string got = client.take();
  // What the pod sent goes out, chunked and without the last chunk: every HTTP client sees the
  // body broken off rather than a short but complete answer.
  EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos) << got;
  EXPECT_NE(got.find("{\"id\":\"x\","), std::string::npos) << got;
  EXPECT_FALSE(got.ends_with("0\r\n\r\n")) << got;
}

class ProxyUpstream : public ::testing::Test {
 protected:
  ProxyUpstream() : pod_(512, 64 * 1024 - 8), proxy_(pod_.address()) {}
  static std::string request() {
    const std::string body = R"({"model":"m","prompt":"hi","stream":true,"max_tokens":4})";
    return "POST /v1/completions HTTP/1.1\r\nHost: epp\r\nContent-Type: application/json\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  // Reads one chunked answer to its terminating chunk; the bytes of its body (chunk sizes and
  // framing included, which is enough to compare amounts), or 0 if the answer broke off.
  static std::size_t read_answer(http::testing::RawSocket& client) {
    while (!client.buffered().ends_with("\r\n0\r\n\r\n")) {
      if (client.read_some() <= 0) {
        return 0;
      }
    }
    return client.take().size();
  }

  StreamingPod pod_;
  ProxyInFrontOf proxy_;
};

TEST_F(ProxyUpstream, AClientThatDoesNotReadHoldsThePodBackAndLosesNoByte) {
  http::testing::RawSocket client(proxy_.port(), 30);
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.send_all(request()));
  // Wait until the pod is stuck: what its socket took stops growing.
  std::size_t last = 0;
  for (int still = 0; still < 10;) {
    std::this_thread::sleep_for(20ms);
    const std::size_t now = pod_.sent();
    still = now > 0 && now == last ? still + 1 : 0;
    last = now;
  }
  EXPECT_LT(last, pod_.body_bytes() / 2) << "the proxy read the pod while its client read nothing ("
                                         << last << " of " << pod_.body_bytes() << " bytes)";
  const std::size_t got = read_answer(client);
  EXPECT_GT(got, pod_.body_bytes()) << "every byte reaches the client (plus the framing)";
  std::cout << "the pod was held at " << last << " of " << pod_.body_bytes() << " bytes\n";
}

TEST_F(ProxyUpstream, TheConnectionToThePodIsKeptForTheNextRequest) {
  pod_.set_events(4);
  http::testing::RawSocket client(proxy_.port(), 30);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client.send_all(request()));
    ASSERT_GT(read_answer(client), pod_.body_bytes()) << "request " << i;
  }
  EXPECT_EQ(pod_.requests(), 3);
  EXPECT_EQ(pod_.connections(), 1);
  EXPECT_EQ(proxy_.idle_upstream_connections(), 1u);
}

}  // namespace
}  // namespace llmd::epp

namespace llmd::epp {
namespace {

// A pod whose stream holds a line longer than any OpenAI event (a pod that does not speak SSE):
// the client's stream ends with the error event and never reaches the pod's [DONE], and the
// proxy holds no more than the bound while it reads.
TEST(ProxyStream, AnSseLineBeyondTheBoundEndsTheStreamWithAnError) {
  const std::string body =
      "data: " + std::string(SseScanner::kMaxLineBytes + 4096, 'x') + "\n\ndata: [DONE]\n\n";
  char size[32];
  std::snprintf(size, sizeof(size), "%zx", body.size());
  RawAnswerPod pod(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
      "Transfer-Encoding: chunked\r\n\r\n" +
          std::string(size) + "\r\n" + body + "\r\n0\r\n\r\n",
      true);
  ProxyInFrontOf proxy(pod.address());
  http::testing::RawSocket client(proxy.port(), 30);
  const std::string request = R"({"model":"m","prompt":"hi","max_tokens":4,"stream":true})";
  ASSERT_TRUE(
      client.send_all("POST /v1/completions HTTP/1.1\r\nHost: epp\r\n"
                      "Content-Type: application/json\r\nContent-Length: " +
                      std::to_string(request.size()) + "\r\n\r\n" + request));
  while (client.read_some() > 0) {
  }
  const std::string& got = client.buffered();
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got.substr(0, 200);
  EXPECT_NE(got.find("The model server failed while streaming"), std::string::npos)
      << got.substr(got.size() > 300 ? got.size() - 300 : 0);
  EXPECT_EQ(got.find("[DONE]"), std::string::npos);
}

}  // namespace
}  // namespace llmd::epp
