// The EPP's data plane through the real binaries. Outlier detection: a pod is taken out only
// after a run of failed requests, never more than a share of the pool at once, and below the
// panic threshold the EPP routes over every pod instead of answering 503; /readyz says whether
// the EPP can serve. Upstream connections: kept alive and reused across requests.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/common/http_test_util.h"
#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

using http::testing::RawSocket;

class DataPlaneStack : public StackTest {
 protected:
  int readyz() {
    http::HttpClient c("127.0.0.1", stack_->health_port, std::chrono::seconds(5));
    return c.get("/readyz").status;
  }
  // A streamed completion on its own connection: the pod that served it (from the response
  // headers) and whether the stream ended cleanly with [DONE].
  std::pair<std::string, bool> stream_once(const std::string& prompt) {
    Json body = {{"model", stack_->model}, {"prompt", prompt}, {"max_tokens", 6}, {"stream", true}};
    const std::string text = body.dump();
    RawSocket sock(stack_->epp_port);
    if (!sock.connected() ||
        !sock.send_all("POST /v1/completions HTTP/1.1\r\nHost: epp\r\nContent-Type: "
                       "application/json\r\nContent-Length: " +
                       std::to_string(text.size()) + "\r\nConnection: close\r\n\r\n" + text)) {
      return {"", false};
    }
    while (sock.read_some() > 0) {
    }
    const std::string& got = sock.buffered();
    std::string pod;
    const std::string key = "x-gateway-destination-endpoint: ";
    if (auto at = got.find(key); at != std::string::npos) {
      pod = got.substr(at + key.size(), got.find("\r\n", at) - at - key.size());
    }
    return {pod, got.find("[DONE]") != std::string::npos};
  }
  double metric(const std::string& prefix) { return metric_sum(stack_->metrics(), prefix); }
};

// The failure that used to take a whole pool out: one broken stream on each pod.
TEST_F(DataPlaneStack, OneBrokenStreamOnEveryPodKeepsEveryPodAndReadiness) {
  StackOptions o;
  o.pods = 4;
  o.predictors = 1;
  start(o);
  for (int p = 0; p < o.pods; ++p) {
    // Only pod p cuts streams: send until one lands there (the others answer), then heal it.
    fault(p, R"({"mode":"close","after_tokens":2})");
    bool broken = false;
    for (int i = 0; i < 200 && !broken; ++i) {
      auto [pod, clean] = stream_once(words(8, "p" + std::to_string(p) + "r" + std::to_string(i)));
      broken = pod == stack_->pod_address(p) && !clean;
      ASSERT_TRUE(pod == stack_->pod_address(p) || clean) << pod << " " << i;
    }
    ASSERT_TRUE(broken) << "pod " << p << " never got a stream";
    fault(p, R"({"mode":"none"})");
  }
  EXPECT_EQ(metric("llmd_epp_pod_attempts_total{code=\"502\"}"), o.pods);
  // Every pod is still a candidate: the next requests are served, readiness stays up.
  int ok = 0;
  const int n = 40;
  for (int i = 0; i < n; ++i) {
    ok += stack_->complete(words(6, "after" + std::to_string(i)), 2).status == 200 ? 1 : 0;
    if (i % 10 == 0) {
      EXPECT_EQ(readyz(), 200);
    }
  }
  EXPECT_GE(ok, n * 95 / 100);
  EXPECT_EQ(ok, n) << "no pod was taken out";
  const std::string m = stack_->metrics();
  EXPECT_EQ(metric_sum(m, "llmd_epp_pool{stat=\"ejected_pods\"}"), 0) << m;
  EXPECT_EQ(metric_sum(m, "llmd_epp_pool{stat=\"healthy_pods\"}"), 4) << m;
  EXPECT_EQ(metric_sum(m, "llmd_epp_pod_ejections_total{"), 0) << m;
}

// A pod that answers every request with 500 looks idle to a load-aware router (it holds no
// queue): without ejection it would draw traffic forever. It is ejected after a run of failures,
// the clients never see them (each was retried on another pod), and it then gets no traffic.
TEST_F(DataPlaneStack, APodThatKeepsFailingIsEjectedAndTheOthersServe) {
  StackOptions o;
  o.pods = 3;
  o.predictors = 1;
  start(o);
  fault(0, R"({"mode":"error"})");
  int non_ok = 0;
  for (int i = 0; i < 300 && metric("llmd_epp_pod_ejections_total{pod=\"pod-0\"}") < 1; ++i) {
    non_ok += stack_->complete(words(6, "x" + std::to_string(i)), 2).status == 200 ? 0 : 1;
  }
  ASSERT_EQ(metric("llmd_epp_pod_ejections_total{pod=\"pod-0\"}"), 1) << stack_->metrics();
  EXPECT_EQ(metric("llmd_epp_pod_attempts_total{code=\"500\"}"), 5) << "5 in a row eject";
  EXPECT_EQ(metric("llmd_epp_pod_ejected{pod=\"pod-0\"}"), 1);
  EXPECT_EQ(metric("llmd_epp_pod_ejected{pod=\"pod-1\"}"), 0);
  for (int i = 0; i < 30; ++i) {
    non_ok += stack_->complete(words(6, "y" + std::to_string(i)), 2).status == 200 ? 0 : 1;
  }
  EXPECT_EQ(non_ok, 0) << "every failure was retried on another pod";
  EXPECT_EQ(metric("llmd_epp_pod_attempts_total{code=\"500\"}"), 5) << "no traffic while ejected";
  EXPECT_EQ(readyz(), 200);
  EXPECT_NE(stack_->epp->log().find("pod pod-0 ejected for 30.0 s after 5 consecutive failures"),
            std::string::npos);
}

// Every pod ejected (the cap raised to the whole pool): below the panic threshold the EPP keeps
// routing over all of them (a pod's 502, not the EPP's 503), stays ready, and serves again as
// soon as the pods do, although their ejections have not run out.
TEST_F(DataPlaneStack, BelowThePanicThresholdEveryPodIsTriedAndTheEppStaysReady) {
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  o.startup["outlierDetection.consecutiveFailures"] = "1";
  o.startup["outlierDetection.maxEjectionPercent"] = "100";
  start(o);
  fault(0, R"({"mode":"error"})");
  fault(1, R"({"mode":"error"})");
  EXPECT_EQ(stack_->complete(words(6, "a"), 2).status, 502);  // both tried, both ejected
  EXPECT_EQ(metric("llmd_epp_pool{stat=\"ejected_pods\"}"), 2);
  EXPECT_EQ(metric("llmd_epp_pool{stat=\"panic_mode\"}"), 1);
  EXPECT_EQ(stack_->complete(words(6, "b"), 2).status, 502) << "routed anyway, not 503";
  EXPECT_EQ(readyz(), 200);
  fault(0, R"({"mode":"none"})");
  fault(1, R"({"mode":"none"})");
  EXPECT_EQ(stack_->complete(words(6, "c"), 2).status, 200);
  const std::string m = stack_->metrics();
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"503\""), 0) << m;
  EXPECT_EQ(metric_sum(m, "llmd_epp_pod_ejections_total{"), 2) << m;
}

// Connections to pods are kept alive and reused: 2,000 sequential and concurrent requests,
// streamed and not, open about as many connections as were ever in use at once, not one per
// request (the issue's bound: the 4 pods accept at most 100).
TEST_F(DataPlaneStack, ConnectionsToPodsAreReusedAcrossRequests) {
  StackOptions o;
  o.pods = 4;
  o.predictors = 1;
  start(o);
  const int rounds = 250, clients = 8;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      http::HttpClient client("127.0.0.1", stack_->epp_port, std::chrono::seconds(30));
      for (int i = 0; i < rounds; ++i) {
        Json body = {{"model", stack_->model},
                     {"prompt", words(6, "c" + std::to_string(c) + "i" + std::to_string(i))},
                     {"max_tokens", 2},
                     {"stream", i % 2 == 0}};
        ok += client.post("/v1/completions", body.dump()).status == 200 ? 1 : 0;
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(ok, rounds * clients);
  const std::string m = stack_->metrics();
  const double opened = metric_sum(m, "llmd_epp_upstream_connections_total{connection=\"opened\"}");
  const double reused = metric_sum(m, "llmd_epp_upstream_connections_total{connection=\"reused\"}");
  EXPECT_GE(opened + reused, rounds * clients) << m;
  // At most `clients` requests are in flight at once, on at most 4 pods.
  EXPECT_LE(opened, clients * o.pods) << m;
  EXPECT_LE(opened, 100) << m;
  EXPECT_GE(metric_sum(m, "llmd_epp_pool{stat=\"idle_upstream_connections\"}"), 1) << m;
}

// A pod whose /metrics hangs delays only its own metrics: the others are scraped on time, so they
// never go stale (the stack's staleness bound, 1 s, equals the scrape timeout).
TEST_F(DataPlaneStack, APodWhoseMetricsHangDelaysNoOtherPod) {
  StackOptions o;
  o.pods = 3;
  o.predictors = 1;
  start(o);
  fault(0, R"({"mode":"stall","duration_ms":20000})");
  double ready = 0;
  for (int i = 0; i < 100 && (ready = metric("llmd_epp_pool{stat=\"ready_pods\"}")) != 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(ready, 2) << "the stalled pod's metrics went stale";
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(metric("llmd_epp_pool{stat=\"ready_pods\"}"), 2) << "sample " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(stack_->complete(words(6, "while stalled"), 2).status, 200);
  fault(0, R"({"mode":"none"})");
}

// A 1,024-descriptor limit and 1,100 idle connections to the EPP and to a predictor: both stop
// accepting at their share of the limit instead of running out (which aborted them: an
// HttpClient for feedback or model sync could not get its eventfd), a stream in flight
// finishes, probes are answered, and both serve again once the connections are gone.
TEST_F(DataPlaneStack, IdleConnectionsBeyondTheDescriptorLimitKillNeitherEppNorPredictor) {
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  o.epp_max_open_files = 1024;
  start(o);
  const uint16_t predictor_port = free_port();
  const std::string d = stack_->dir_.path() + "/limited";
  Process predictor(
      binary("predictor/predictor"),
      {"--host", "127.0.0.1", "--port", std::to_string(predictor_port), "--training-server-url",
       "http://127.0.0.1:" + std::to_string(stack_->trainer->port), "--model-sync-interval", "0.2",
       "--workers", "1", "--local-ttft-model-path", d + "/ttft.ubj", "--local-tpot-model-path",
       d + "/tpot.ubj", "--local-ttft-gated-model-path", d + "/ttft_gated.bin",
       "--local-tpot-gated-model-path", d + "/tpot_gated.bin"},
      {}, 1024);
  ASSERT_TRUE(predictor.wait_http_ok(predictor_port, "/readyz"));
  int stream_status = 0;
  std::thread streamer([&] {
    http::HttpClient c("127.0.0.1", stack_->epp_port, std::chrono::seconds(60));
    Json body = {{"model", stack_->model},
                 {"prompt", words(10, "during")},
                 {"max_tokens", 300},
                 {"stream", true}};
    stream_status = c.post("/v1/completions", body.dump()).status;
  });
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < 1100; ++i) {
    idle.push_back(std::make_unique<RawSocket>(stack_->epp_port, 1));
    idle.push_back(std::make_unique<RawSocket>(predictor_port, 1));
  }
  for (int i = 0; i < 200 && (stack_->epp->log().find("accepting again in") == std::string::npos ||
                              predictor.log().find("accepting again in") == std::string::npos);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(stack_->epp->log().find("accepting again in"), std::string::npos);
  EXPECT_NE(predictor.log().find("accepting again in"), std::string::npos);
  EXPECT_EQ(readyz(), 200) << "probes are answered while clients hold the budget";
  // Feedback flushes and model syncs run meanwhile (every 0.2-1 s): they need descriptors.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  streamer.join();
  EXPECT_EQ(stream_status, 200);
  EXPECT_TRUE(stack_->epp->running()) << stack_->epp->log();
  EXPECT_TRUE(predictor.running()) << predictor.log();
  EXPECT_EQ(predictor.log().find("Too many open files"), std::string::npos) << predictor.log();
  idle.clear();
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    status = stack_->complete(words(6, "after" + std::to_string(i)), 2).status;
    if (status != 200) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_EQ(status, 200);
  http::HttpClient p("127.0.0.1", predictor_port, std::chrono::seconds(5));
  EXPECT_EQ(p.get("/readyz").status, 200);
}

}  // namespace
}  // namespace llmd::testing
