// The request lifecycle through the real binaries: what a client sees when a pod breaks off a
// response, and what happens to a request whose client leaves while it waits in the queue.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "tests/common/http_test_util.h"
#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

using http::testing::RawSocket;

// Joins the test's client threads on every exit path (a failed ASSERT returns early; a joinable
// std::thread would then terminate the test binary instead of reporting the failure).
class JoinAll {
 public:
  explicit JoinAll(std::vector<std::thread>& threads) : threads_(threads) {}
  ~JoinAll() {
    for (auto& t : threads_) {
      if (t.joinable()) {
        t.join();
      }
    }
  }
  JoinAll(const JoinAll&) = delete;
  JoinAll& operator=(const JoinAll&) = delete;

 private:
  std::vector<std::thread>& threads_;
};

// Sum of a modelsim metric over the stack's pods.
double pod_metric(Stack& stack, int pods, const std::string& prefix) {
  double n = 0;
  for (int p = 0; p < pods; ++p) {
    http::HttpClient pod("127.0.0.1", stack.pod_port(p));
    n += metric_sum(pod.get("/metrics").body, prefix);
  }
  return n;
}

class LifecycleStack : public StackTest {
 protected:
  std::string raw_request(const std::string& prompt, int max_tokens, bool stream) {
    Json body = {{"model", stack_->model},
                 {"prompt", prompt},
                 {"max_tokens", max_tokens},
                 {"stream", stream}};
    const std::string text = body.dump();
    return "POST /v1/completions HTTP/1.1\r\nHost: epp\r\nContent-Type: application/json\r\n"
           "Content-Length: " +
           std::to_string(text.size()) + "\r\n\r\n" + text;
  }
  // Polls the EPP's metrics until the sum of `prefix` reaches `want` (up to 10 s).
  // Polls (up to 10 s) until the metric reaches `want`: at least it, or with `falling` at most
  // it (a count released just after the answer); returns the last value read.
  double wait_metric(const std::string& prefix, double want, bool falling = false) {
    double v = 0;
    for (int i = 0; i < 100; ++i) {
      v = metric_sum(stack_->metrics(), prefix);
      if (falling ? v <= want : v >= want) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return v;
  }
};

TEST_F(LifecycleStack, PodThatClosesMidStreamIsAnErrorTheClientSees) {
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  start(o);
  fault(0, R"({"mode":"close","after_tokens":3})");
  fault(1, R"({"mode":"close","after_tokens":3})");
  RawSocket sock(stack_->epp_port);
  ASSERT_TRUE(sock.connected());
  ASSERT_TRUE(sock.send_all(raw_request(words(30, "cut"), 20, true)));
  while (sock.read_some() > 0) {
  }
  const std::string& got = sock.buffered();
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_NE(got.find("data: {\"error\""), std::string::npos) << "an error event: " << got;
  EXPECT_EQ(got.find("[DONE]"), std::string::npos) << got;
  EXPECT_FALSE(got.ends_with("0\r\n\r\n")) << "no terminating chunk: the body is incomplete";
  // Counted as a failure of the pod, not as a 200.
  const std::string m = stack_->metrics();
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"200\""), 0) << m;
  EXPECT_GE(metric_sum(m, "llmd_epp_requests_total{code=\"502\""), 1) << m;
}

TEST_F(LifecycleStack, ClientThatDisconnectsWhileQueuedIsNeverDispatched) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  // One request in flight saturates the pod: everything else waits in the router queue.
  o.extra_config =
      "routerQueue:\n  policy: fcfs\n  routerQueueThreshold: {inFlightRequests: 1}\n"
      "  timeoutMs: 60000\n";
  start(o);
  int long_status = 0;
  std::vector<std::thread> threads;
  JoinAll join(threads);
  threads.emplace_back([&] {
    http::HttpClient c("127.0.0.1", stack_->epp_port, std::chrono::seconds(120));
    // Streamed: its headers come at once (the stack's first-byte timeout is 2 s).
    Json body = {{"model", stack_->model},
                 {"prompt", words(20, "long")},
                 {"max_tokens", 600},
                 {"stream", true}};
    long_status = c.post("/v1/completions", body.dump()).status;
  });
  // The long request runs on the pod (a loaded CI machine may take a while to get there).
  for (int i = 0; i < 500 && pod_metric(*stack_, 1, "vllm:num_requests_running") < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(pod_metric(*stack_, 1, "vllm:num_requests_running"), 1);
  {
    std::vector<std::unique_ptr<RawSocket>> waiting;
    for (int i = 0; i < 3; ++i) {
      waiting.push_back(std::make_unique<RawSocket>(stack_->epp_port));
      ASSERT_TRUE(waiting.back()->send_all(
          raw_request(words(20, "gone" + std::to_string(i)), 4, i % 2 == 0)));
    }
    ASSERT_GE(wait_metric("llmd_epp_router_queue_pending{", 3), 3) << stack_->metrics();
  }  // the three clients hang up
  EXPECT_GE(wait_metric("llmd_epp_router_queue_requests_total{outcome=\"cancelled\"}", 3), 3);
  threads.front().join();
  EXPECT_EQ(long_status, 200);
  ASSERT_EQ(stack_->complete(words(10, "after"), 2).status, 200);
  const std::string m = stack_->metrics();
  EXPECT_EQ(metric_sum(m, "llmd_epp_router_queue_pending{"), 0) << m;
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{"), 2) << "only two requests were dispatched";
  http::HttpClient pod("127.0.0.1", stack_->pod_port(0));
  EXPECT_EQ(metric_sum(pod.get("/metrics").body, "vllm:e2e_request_latency_seconds_count"), 2)
      << "the pod never saw the requests whose clients left";
}

TEST_F(LifecycleStack, SigtermLetsEveryStreamInFlightFinishAndExitsZero) {
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  start(o);
  constexpr int kStreams = 16;
  std::vector<std::thread> clients;
  JoinAll join(clients);
  std::vector<http::ClientResponse> got(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      http::HttpClient c("127.0.0.1", stack_->epp_port, std::chrono::seconds(60));
      Json body = {{"model", stack_->model},
                   {"prompt", words(30, "s" + std::to_string(i))},
                   {"max_tokens", 200},
                   {"stream", true}};
      got[i] = c.post("/v1/completions", body.dump());
    });
  }
  // Every stream is running on a pod before the signal.
  auto running = [&] { return pod_metric(*stack_, o.pods, "vllm:num_requests_running"); };
  for (int i = 0; i < 200 && running() < kStreams; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(running(), kStreams);
  ASSERT_EQ(::kill(stack_->epp->pid(), SIGTERM), 0);
  // Readiness drops at once, so a load balancer stops sending.
  int ready_status = 200;
  for (int i = 0; i < 50 && ready_status == 200; ++i) {
    http::HttpClient h("127.0.0.1", stack_->health_port, std::chrono::seconds(2));
    ready_status = h.get("/readyz").status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ready_status, 503);
  for (auto& t : clients) {
    t.join();
  }
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_EQ(got[i].status, 200) << i << ": " << got[i].error;
    EXPECT_NE(got[i].body.find("data: [DONE]"), std::string::npos) << i;
  }
  EXPECT_EQ(stack_->epp->terminate(std::chrono::seconds(30)), 0)
      << "the EPP exits 0 after the drain";
  EXPECT_NE(stack_->epp->log().find("drained: no request in flight"), std::string::npos);
}

// CPU seconds (user + system) the process has used so far.
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i >= 14) {
      ticks += std::stod(field);  // utime, stime
    }
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

TEST_F(LifecycleStack, OutOfFileDescriptorsTheProxyBacksOffAndRecovers) {
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  o.epp_max_open_files = 64;
  start(o);
  ASSERT_EQ(stack_->complete(words(10, "before"), 2).status, 200);
  // Idle connections until the EPP can accept no more (its listener then stays readable).
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < 80; ++i) {
    idle.push_back(std::make_unique<RawSocket>(stack_->epp_port, 1));
  }
  for (int i = 0; i < 100 && stack_->epp->log().find("accepting again in") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string log = stack_->epp->log();
  ASSERT_NE(log.find("connections hold the descriptors the process gives to clients"),
            std::string::npos)
      << "the proxy stopped accepting at its share of the descriptor limit";
  EXPECT_EQ(log.find("accept failed"), std::string::npos) << "before the process ran out";
  const double cpu0 = cpu_seconds(stack_->epp->pid());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double busy = cpu_seconds(stack_->epp->pid()) - cpu0;
  EXPECT_LT(busy, 0.5) << "no accept spin while out of descriptors (CPU s in 2 s)";
  {
    // Probes are still answered: the health listener takes nothing from the clients' budget.
    http::HttpClient health("127.0.0.1", stack_->health_port, std::chrono::seconds(5));
    EXPECT_EQ(health.get("/readyz").status, 200);
  }
  idle.clear();
  // Recovers: once descriptors are free, requests are served again (the scraper may need a
  // moment to reconnect to the pods).
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    http::HttpClient c("127.0.0.1", stack_->epp_port, std::chrono::seconds(5));
    Json body = {{"model", stack_->model}, {"prompt", words(10, "after")}, {"max_tokens", 2}};
    status = c.post("/v1/completions", body.dump()).status;
    if (status != 200) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  EXPECT_EQ(status, 200);
}

TEST_F(LifecycleStack, HttpEdgesHeaderTimeoutAllowAndHttp10) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  o.startup["proxy.headerTimeoutMs"] = "300";
  start(o);
  {
    // Headers that never finish: dropped after the header timeout, not the 60-s idle timeout.
    RawSocket slow(stack_->epp_port, 5);
    ASSERT_TRUE(slow.send_all("POST /v1/completions HTTP/1.1\r\nHost: epp\r\n"));
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(slow.wait_for_close());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  }
  {
    // An idle kept-alive connection is not cut by the (short) header timeout.
    RawSocket idle(stack_->epp_port, 5);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    ASSERT_TRUE(idle.send_all(raw_request(words(10, "idle"), 2, false)));
    auto res = idle.read_response();
    ASSERT_TRUE(res.has_value());
    EXPECT_EQ(res->rfind("HTTP/1.1 200", 0), 0u) << *res;
  }
  {
    RawSocket get(stack_->epp_port);
    ASSERT_TRUE(get.send_all("GET /v1/completions HTTP/1.1\r\nHost: epp\r\n\r\n"));
    auto res = get.read_response();
    ASSERT_TRUE(res.has_value());
    EXPECT_EQ(res->rfind("HTTP/1.1 405", 0), 0u) << *res;
    EXPECT_NE(res->find("Allow: POST"), std::string::npos) << *res;
  }
  {
    // HTTP/1.0 has no chunked encoding: the stream arrives as is and ends with the connection.
    RawSocket old(stack_->epp_port);
    std::string request = raw_request(words(10, "old"), 4, true);
    request.replace(request.find("HTTP/1.1"), 8, "HTTP/1.0");
    ASSERT_TRUE(old.send_all(request));
    while (old.read_some() > 0) {
    }
    const std::string& got = old.buffered();
    EXPECT_EQ(got.rfind("HTTP/1.0 200", 0), 0u) << got;
    EXPECT_EQ(got.find("Transfer-Encoding"), std::string::npos) << got;
    EXPECT_TRUE(got.ends_with("data: [DONE]\n\n")) << got;
  }
}

TEST_F(LifecycleStack, ClientAuthorizationReachesPodsStartedWithAnApiKey) {
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  o.modelsim_args = {"--api-key", "sk-pool"};
  start(o);
  auto with_key =
      stack_->complete(words(10, "auth"), 2, false, {{"Authorization", "Bearer sk-pool"}});
  EXPECT_EQ(with_key.status, 200) << with_key.body;
  auto streamed =
      stack_->complete(words(10, "auth"), 2, true, {{"Authorization", "Bearer sk-pool"}});
  EXPECT_EQ(streamed.status, 200) << streamed.body;
  // Without it the pod's own 401 passes through as the pod wrote it.
  auto without = stack_->complete(words(10, "auth"), 2);
  EXPECT_EQ(without.status, 401) << without.body;
  EXPECT_NE(without.body.find("Unauthorized"), std::string::npos) << without.body;
}

// One count per client request with the status the client got; pod attempts apart.
TEST_F(LifecycleStack, RequestCountsAreWhatClientsGotAndPodAttemptsApart) {
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  // One failure ejects a pod, the whole pool may be ejected and there is no panic routing.
  o.epp_args = {"--max-body-bytes", "4096"};
  o.startup["outlierDetection.consecutiveFailures"] = "1";
  o.startup["outlierDetection.maxEjectionPercent"] = "100";
  o.startup["outlierDetection.panicThresholdPercent"] = "0";
  start(o);
  fault(0, R"({"mode":"error","duration_ms":60000})");
  fault(1, R"({"mode":"error","duration_ms":60000})");
  // Both pods answer 500: the first request tries both (two attempts) and the client gets one
  // 502; both pods are then ejected, so the second is answered 503 by the EPP itself.
  EXPECT_EQ(stack_->complete(words(10, "e0"), 2).status, 502);
  EXPECT_EQ(stack_->complete(words(10, "e1"), 2).status, 503);
  // A body over the limit: the client reads the 413 (no reset while it is still uploading).
  http::HttpClient big("127.0.0.1", stack_->epp_port);
  Json body = {{"model", stack_->model}, {"prompt", std::string(200000, 'x')}, {"max_tokens", 2}};
  auto r = big.post("/v1/completions", body.dump());
  EXPECT_EQ(r.status, 413) << r.error;
  EXPECT_TRUE(Json::parse(r.body)["error"]["code"].is_null()) << r.body;
  EXPECT_EQ(stack_->complete("{", 2, false, {}, Json{{"prompt", 7}}).status, 400);
  const std::string m = stack_->metrics();
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"502\""), 1) << m;
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"503\""), 1);
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"413\""), 1);
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"400\""), 1);
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"500\""), 0);
  EXPECT_EQ(metric_sum(m, "llmd_epp_pod_attempts_total{code=\"500\"}"), 2);
}

// Right after a start no pod has answered yet: rejections still carry the model's name, which
// the pool's pods publish in their metrics; a name the pool does not serve stays "other".
TEST_F(LifecycleStack, RejectionsBeforeTheFirstSuccessCarryTheModelName) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  o.startup["outlierDetection.consecutiveFailures"] = "1";
  o.startup["outlierDetection.panicThresholdPercent"] = "0";
  start(o);
  fault(0, R"({"mode":"error","duration_ms":60000})");
  EXPECT_EQ(stack_->complete(words(10, "l0"), 2).status, 502);  // the only pod answers 500
  EXPECT_EQ(stack_->complete(words(10, "l1"), 2).status, 503);  // it is ejected
  EXPECT_EQ(stack_->complete(words(10, "l2"), 2, false, {}, Json{{"model", "no-such"}}).status,
            503);
  const std::string m = stack_->metrics();
  const std::string named = "llmd_epp_requests_total{code=\"503\",model_name=\"" + stack_->model;
  EXPECT_EQ(metric_sum(m, named), 1) << m;
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"502\",model_name=\"" + stack_->model), 1);
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"503\",model_name=\"other\""), 1);
  EXPECT_EQ(m.find("no-such"), std::string::npos);
}

// A pod's failure to answer is counted by its cause: a pod that closes the connection before a
// response is 502 (as the client gets it), one that sends nothing within the first-byte
// timeout is 504.
TEST_F(LifecycleStack, PodAttemptCodesTellAClosedConnectionFromATimeout) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  o.startup["outlierDetection.consecutiveFailures"] = "0";
  o.startup["proxy.upstreamFirstByteTimeoutMs"] = "300";
  start(o);
  fault(0, R"({"mode":"close","duration_ms":60000})");
  EXPECT_EQ(stack_->complete(words(10, "c0"), 2).status, 502);
  std::string m = stack_->metrics();
  EXPECT_GE(metric_sum(m, "llmd_epp_pod_attempts_total{code=\"502\""), 1) << m;
  EXPECT_EQ(metric_sum(m, "llmd_epp_pod_attempts_total{code=\"504\""), 0) << m;
  fault(0, R"({"mode":"stall","duration_ms":60000})");
  EXPECT_EQ(stack_->complete(words(10, "t0"), 2).status, 502);
  m = stack_->metrics();
  EXPECT_GE(metric_sum(m, "llmd_epp_pod_attempts_total{code=\"504\""), 1) << m;
  fault(0, R"({"mode":"none"})");
}

// A client that abandons a stream the pod stopped sending releases the pod's in-flight count
// at once, not after the upstream idle timeout (60 s): the EPP notices the client is gone and
// ends the attempt as a client abort (499), not as a pod failure.
TEST_F(LifecycleStack, ClientThatAbandonsAHungStreamReleasesThePodAtOnce) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  o.startup["proxy.upstreamFirstByteTimeoutMs"] = "60000";
  start(o);
  {
    RawSocket client(stack_->epp_port);
    ASSERT_TRUE(client.send_all(raw_request(words(20, "hung"), 2000, true)));
    while (client.buffered().find("data: ") == std::string::npos) {
      ASSERT_GT(client.read_some(), 0) << client.buffered();
    }
    fault(0, R"({"mode":"stall","duration_ms":120000})");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the pod is silent now
  }                                                               // the client hangs up
  EXPECT_GE(wait_metric("llmd_epp_pod_attempts_total{code=\"499\"}", 1), 1) << stack_->metrics();
  fault(0, R"({"mode":"none"})");
  const std::string m = stack_->metrics();
  EXPECT_EQ(metric_sum(m, "llmd_epp_pod_attempts_total{code=\"502\"}"), 0) << m;
  EXPECT_EQ(metric_sum(m, "llmd_epp_pod_attempts_total{code=\"504\"}"), 0) << m;
  // The pod is back (fresh metrics) with nothing in flight: it serves at once.
  ASSERT_EQ(stack_->complete(words(10, "after"), 2).status, 200);
  // That request's own count is released just after its last byte reaches the client.
  EXPECT_EQ(wait_metric("llmd_epp_pod_in_flight{", 0, /*falling=*/true), 0);
}

// Headers the client names in Connection: are hop-by-hop and never reach the pod.
TEST_F(LifecycleStack, HeadersNamedInConnectionAreNotForwarded) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  o.modelsim_args = {"--api-key", "sk-pool"};
  start(o);
  // The pod needs the key: named in Connection, Authorization is dropped (the pod's 401);
  // otherwise it travels on.
  auto dropped = stack_->complete(
      words(10, "c"), 2, false,
      {{"Authorization", "Bearer sk-pool"}, {"Connection", "keep-alive, Authorization"}});
  EXPECT_EQ(dropped.status, 401) << dropped.body;
  auto kept = stack_->complete(
      words(10, "c"), 2, false,
      {{"Authorization", "Bearer sk-pool"}, {"Connection", "keep-alive, x-other"}});
  EXPECT_EQ(kept.status, 200) << kept.body;
}

// Bodies held at once are bounded: past the budget a request gets 503 + Retry-After before its
// body is read, and is served again once memory is free.
TEST_F(LifecycleStack, RequestBodiesBeyondTheBudgetGetA503UntilMemoryIsFree) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  o.epp_args = {"--body-budget-bytes", "200000"};
  start(o);
  const std::string big = words(30000, "b");  // ~117 KB: two do not fit in 200 KB
  int long_status = 0;
  std::vector<std::thread> threads;
  JoinAll join(threads);
  threads.emplace_back([&] {
    http::HttpClient c("127.0.0.1", stack_->epp_port, std::chrono::seconds(60));
    Json body = {{"model", stack_->model}, {"prompt", big}, {"max_tokens", 600}, {"stream", true}};
    long_status = c.post("/v1/completions", body.dump()).status;
  });
  for (int i = 0; i < 500 && pod_metric(*stack_, 1, "vllm:num_requests_running") < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(pod_metric(*stack_, 1, "vllm:num_requests_running"), 1);
  http::HttpClient c("127.0.0.1", stack_->epp_port);
  Json second = {{"model", stack_->model}, {"prompt", big}, {"max_tokens", 2}};
  auto refused = c.post("/v1/completions", second.dump());
  EXPECT_EQ(refused.status, 503) << refused.error;
  EXPECT_EQ(refused.header("retry-after"), "1");
  threads.front().join();
  EXPECT_EQ(long_status, 200);
  // The EPP frees the long request's body when its exchange ends, which can come a moment after
  // the client has read the last byte: retry on 503 as a client honouring Retry-After would
  // (the bound only guards against a hang; the budget must come free).
  http::HttpClient after("127.0.0.1", stack_->epp_port);
  int status = 0;
  for (int i = 0; i < 1200 && status != 200; ++i) {  // hang guard: 30 s
    auto r = after.post("/v1/completions", second.dump());
    status = r.status;
    if (status == 503 && r.header("retry-after") == "1") {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      continue;
    }
    break;
  }
  EXPECT_EQ(status, 200) << "the budget did not come free within 30 s of the long request's end";
}

// Every status the EPP writes itself is an OpenAI error object (the SDKs build their exception
// from it), with Retry-After where retrying later helps.
TEST_F(LifecycleStack, EveryEppErrorIsAnOpenAiErrorObject) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  o.epp_args = {"--max-body-bytes", "4096"};
  o.startup["outlierDetection.consecutiveFailures"] = "1";
  o.startup["outlierDetection.panicThresholdPercent"] = "0";
  start(o);
  fault(0, R"({"mode":"error","duration_ms":60000})");
  http::HttpClient c("127.0.0.1", stack_->epp_port);
  const std::string ok_body =
      Json{{"model", stack_->model}, {"prompt", "hi"}, {"max_tokens", 2}}.dump();
  struct Case {
    int status;
    const char* type;
    http::ClientResponse got;
    Json param = nullptr;  // the offending field of a 400, else null
    Json code = nullptr;   // a string or null, never a number
  };
  auto body_with = [&](Json extra) {
    Json b = {{"model", stack_->model}, {"prompt", "hi"}, {"max_tokens", 2}};
    b.merge_patch(extra);
    return b.dump();
  };
  std::vector<Case> cases = {
      {400, "invalid_request_error", c.post("/v1/completions", "{not json")},
      {400, "invalid_request_error", c.post("/v1/completions", body_with({{"max_tokens", "x"}})),
       "max_tokens", "invalid_value"},
      {400, "invalid_request_error", c.post("/v1/completions", body_with({{"model", nullptr}})),
       "model", "missing_required_parameter"},
      {400, "invalid_request_error",
       c.post("/v1/chat/completions",
              Json{{"model", stack_->model}, {"messages", {{{"role", "user"}, {"content", 7}}}}}
                  .dump()),
       "messages[0].content", "invalid_value"},
      {400, "invalid_request_error",
       // (1 is a boolean to vLLM, and so to the EPP: "maybe" is not.)
       c.post("/v1/completions", body_with({{"stream_options", {{"include_usage", "maybe"}}}})),
       "stream_options.include_usage", "invalid_value"},
      {404, "not_found_error", c.post("/v1/embeddings", ok_body)},
      {404, "not_found_error", c.get("/v1/models/org%2Fnone"), nullptr, "model_not_found"},
      {405, "invalid_request_error", c.get("/v1/chat/completions")},
      {413, "invalid_request_error",
       c.post("/v1/completions",
              Json{{"model", stack_->model}, {"prompt", std::string(9000, 'x')}}.dump())},
      {502, "server_error", c.post("/v1/completions", ok_body)},  // the only pod answers 500
      {503, "service_unavailable_error", c.post("/v1/completions", ok_body)},  // it is ejected
  };
  for (const auto& k : cases) {
    ASSERT_EQ(k.got.status, k.status) << k.got.body << k.got.error;
    const Json e = Json::parse(k.got.body)["error"];
    EXPECT_TRUE(e["message"].is_string()) << k.status;
    EXPECT_EQ(e["type"], k.type) << k.status;
    ASSERT_TRUE(e.contains("param")) << k.got.body;
    EXPECT_EQ(e["param"], k.param) << k.got.body;
    ASSERT_TRUE(e.contains("code")) << k.got.body;
    EXPECT_EQ(e["code"], k.code) << k.got.body;
    EXPECT_EQ(k.got.header("content-type"), "application/json") << k.status;
    EXPECT_EQ(!k.got.header("retry-after").empty(), k.status == 503 || k.status == 429) << k.status;
  }
}

// Whether a TCP connection to ip:port is accepted.
bool accepts(const char* ip, uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// Every listener of the EPP binds 127.0.0.1 unless its manifest opens it, one flag per
// listener. 127.0.0.2 stands for the pod IP: a socket bound to 0.0.0.0 accepts there too, one
// bound to 127.0.0.1 does not.
TEST(EppListeners, BindLoopbackByDefaultAndEachHostFlagOpensOneListener) {
  TempDir dir;
  const std::string pool = dir.file("pool.yaml");
  std::ofstream(pool) << "pool:\n  pods:\n  - {name: p, address: 127.0.0.1:1}\n"
                         "pipeline: " LLMD_SOURCE_DIR "/epp/config/round-robin.yaml\n";
  const uint16_t port = free_port(), health = free_port(), metrics = free_port(),
                 ext_proc = free_port();
  const std::vector<std::string> ports = {"--config",        pool,
                                          "--port",          std::to_string(port),
                                          "--health-port",   std::to_string(health),
                                          "--metrics-port",  std::to_string(metrics),
                                          "--ext-proc-port", std::to_string(ext_proc)};
  {
    Process epp(binary("epp/epp"), ports);
    ASSERT_TRUE(epp.wait_http_ok(health, "/healthz")) << epp.log();
    for (uint16_t p : {port, health, metrics, ext_proc}) {
      EXPECT_TRUE(accepts("127.0.0.1", p)) << p;
      EXPECT_FALSE(accepts("127.0.0.2", p)) << "port " << p << " is open beyond loopback";
    }
  }
  {
    // What the gateway overlay runs: ext_proc, health and metrics open, the proxy in the pod.
    std::vector<std::string> args = ports;
    for (const char* flag : {"--ext-proc-host", "--health-host", "--metrics-host"}) {
      args.insert(args.end(), {flag, "0.0.0.0"});
    }
    Process epp(binary("epp/epp"), args);
    ASSERT_TRUE(epp.wait_http_ok(health, "/healthz")) << epp.log();
    EXPECT_FALSE(accepts("127.0.0.2", port)) << "the proxy";
    for (uint16_t p : {health, metrics, ext_proc}) {
      EXPECT_TRUE(accepts("127.0.0.2", p)) << p << "\n" << epp.log();
    }
  }
}

}  // namespace
}  // namespace llmd::testing
