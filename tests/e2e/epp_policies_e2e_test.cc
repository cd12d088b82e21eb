// The EPP's policies (spec epp.md section 5) through the real executables: model-level latency
// routing across a pool and an upstream URL, the router queue under a saturating burst with
// mixed priorities, and composite-only scheduling with the predictor down.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

class PolicyStack : public StackTest {};

// Pods 0-1 form pool "a"; pod 3 is reached as an upstream URL (pods 2-3 are in pool "b", which
// the rule does not use, so the EPP scrapes but never schedules them).
constexpr const char* kLatencyRule = R"(
loadBalancing:
  type: gateway-load-balancing-config
  settings: {windowSeconds: 3, windowRequests: 20, minSamples: 3}
  rules:
  - id: llama
    type: latency-based-routing
    when:
      models: [meta-llama/Llama-3.1-8B-Instruct]
    load_balance_targets:
    - target: pool:a
    - target: http://127.0.0.1:{pod:3}
      override_params: {max_tokens: 2}
)";

TEST_F(PolicyStack, LatencyRoutingLeavesASlowTargetAndComesBackAfterRecovery) {
  StackOptions o;
  o.predictors = 1;
  o.pod_labels = {"{pool: a}", "{pool: a}", "{pool: b}", "{pool: b}"};
  o.extra_config = kLatencyRule;
  start(o);
  const std::string url_target = stack_->pod_address(3);
  auto send = [&](int n, const std::string& tag) {
    int to_url = 0;
    for (int i = 0; i < n; ++i) {
      auto r = stack_->complete(words(20, tag + std::to_string(i)), 3);
      EXPECT_EQ(r.status, 200) << r.body;
      if (r.header("x-gateway-destination-endpoint") == url_target) {
        ++to_url;
        // override_params reached the upstream: it generated 2 tokens, not the 3 asked for.
        EXPECT_EQ(Json::parse(r.body)["usage"]["completion_tokens"], 2) << r.body;
      }
    }
    return to_url;
  };
  // Warm-up: neither target is judged yet, traffic is spread at random.
  int warm = send(16, "w");
  EXPECT_GT(warm, 0);
  EXPECT_LT(warm, 16);

  fault(3, R"({"mode":"slow","delay_ms":400})");
  int slow = send(40, "s");
  std::printf("latency routing: upstream got %d/16 during warm-up, %d/40 while 400 ms slower\n",
              warm, slow);
  EXPECT_LE(slow, 6) << "the slow target kept receiving traffic";
  std::string m = stack_->metrics();
  EXPECT_NE(m.find("llmd_epp_latency_routing_target{rule=\"llama\",stat=\"fast\",target=\"http://"),
            std::string::npos)
      << m;

  // Recovery: the slow samples age out of the 3 s window, the target is re-tried, found fast.
  fault(3, R"({"mode":"none"})");
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  int back = send(30, "r");
  std::printf("latency routing: upstream got %d/30 after recovery\n", back);
  EXPECT_GE(back, 6) << "the recovered target got no traffic back";
}

TEST_F(PolicyStack, RuleConfigErrorsAreRefusedAtLoadNamingTheRule) {
  TempDir dir;
  std::string pool = dir.file("pool.yaml");
  std::ofstream(pool) << "pool:\n  pods:\n  - {name: p, address: 127.0.0.1:1}\n"
                         "pipeline: " LLMD_SOURCE_DIR
                         "/epp/config/default-pipeline.yaml\n"
                         "loadBalancing:\n  type: gateway-load-balancing-config\n  rules:\n"
                         "  - id: broken-rule\n    type: fastest-wins\n"
                         "    when: {models: [m]}\n    load_balance_targets: [{target: pool}]\n";
  Process epp(binary("epp/epp"),
              {"--config", pool, "--port", "0", "--health-port", "0", "--metrics-port", "0"});
  for (int i = 0; i < 200 && epp.log().find("broken-rule") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(epp.log().find("broken-rule"), std::string::npos) << epp.log();
  // Signals are blocked in the EPP, so the exit status is its own: 2 = bad configuration.
  EXPECT_EQ(epp.terminate(), 2);
  EXPECT_NE(epp.log().find("fastest-wins"), std::string::npos) << epp.log();
}

TEST_F(PolicyStack, ShippedPolicyExampleLoads) {
  Process epp(binary("epp/epp"), {"--config", LLMD_SOURCE_DIR "/epp/config/policies-example.yaml",
                                  "--host", "127.0.0.1", "--port", "0", "--health-port",
                                  std::to_string(free_port()), "--metrics-port", "0"});
  // Up means the whole file parsed: the pods themselves are not running here.
  for (int i = 0; i < 100 && epp.log().find("policies:") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(
      epp.log().find("policies: 3 objectives, 1 model-level routing rules, router queue fcfs"),
      std::string::npos)
      << epp.log();
  EXPECT_TRUE(epp.running()) << epp.log();
}

struct Latencies {
  std::mutex mu;
  std::map<std::string, std::vector<double>> ms;
  void add(const std::string& cls, double v) {
    std::lock_guard lock(mu);
    ms[cls].push_back(v);
  }
  double mean(const std::string& cls) {
    auto& v = ms[cls];
    return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  }
  double quantile(const std::string& cls, double q) {
    auto v = ms[cls];
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
  }
};

TEST_F(PolicyStack, RouterQueueServesHigherTiersAndPrioritiesFirstUnderABurst) {
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  o.modelsim_args = {"--scheduling-policy", "priority"};
  // At most two requests in flight per pod: a burst of 48 must wait in the EPP's queue.
  o.extra_config =
      "routerQueue:\n  policy: fcfs\n  routerQueueThreshold: {inFlightRequests: 2}\n"
      "  timeoutMs: 60000\n";
  start(o);
  Latencies lat;
  std::atomic<int> failures{0};
  auto burst = [&](const std::string& cls, int n, Json hints) {
    std::vector<std::thread> ts;
    for (int i = 0; i < n; ++i) {
      ts.emplace_back([&, cls, i, hints] {
        http::HttpClient c("127.0.0.1", stack_->epp_port, std::chrono::seconds(120));
        Json body = {{"model", stack_->model},
                     {"prompt", words(40, cls + std::to_string(i))},
                     {"max_tokens", 24}};
        if (!hints.is_null()) {
          body["nvext"] = {{"agent_hints", hints}};
        }
        auto t0 = std::chrono::steady_clock::now();
        auto r = c.post("/v1/completions", body.dump());
        if (r.status != 200) {
          ++failures;
          return;
        }
        lat.add(cls,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count());
      });
    }
    return ts;
  };
  // The plain requests arrive first and fill the pods; the prioritised ones come once the EPP
  // holds the plain ones that wait (16 - 4 in flight = 12 pending), and must still overtake
  // them. The test waits for that queue, not for a time (a loaded machine may take longer than
  // any fixed delay to get 16 requests in); the bound is a hang guard.
  auto plain = burst("plain", 16, nullptr);
  double pending = 0;
  for (int i = 0; i < 3000 && (pending = metric_sum(stack_->metrics(),
                                                    "llmd_epp_router_queue_pending{")) < 12;
       ++i) {  // hang guard: 30 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(pending, 12) << "hang guard (30 s): the plain requests never waited in the queue";
  auto soft = burst("priority10", 16, {{"priority", 10}});
  auto tier = burst("strict1", 16, {{"strict_priority", 1}});
  for (auto* g : {&plain, &soft, &tier}) {
    for (auto& t : *g) {
      t.join();
    }
  }
  EXPECT_EQ(failures, 0);
  std::printf("router queue burst (48 requests, 2 pods x 2 in flight), latency ms:\n");
  for (const char* cls : {"strict1", "priority10", "plain"}) {
    std::printf("  %-10s mean %4.0f  p50 %4.0f  p90 %4.0f\n", cls, lat.mean(cls),
                lat.quantile(cls, 0.5), lat.quantile(cls, 0.9));
  }
  // Medians: the first plain requests found free pods and never waited, which drags the plain
  // mean down; the median is a request that waited.
  EXPECT_LT(lat.quantile("strict1", 0.5), lat.quantile("priority10", 0.5));
  EXPECT_LT(lat.quantile("priority10", 0.5), lat.quantile("plain", 0.5));
  EXPECT_LT(lat.quantile("strict1", 0.5), 0.6 * lat.quantile("plain", 0.5));
  std::string m = stack_->metrics();
  EXPECT_GT(metric_sum(m, "llmd_epp_router_queue_requests_total{outcome=\"admitted\"}"), 20) << m;
  EXPECT_NE(m.find("llmd_epp_router_queue_pending{tier=\"1\"} 0"), std::string::npos) << m;
}

TEST_F(PolicyStack, CompositeOnlyIgnoresADownPredictorWithoutErrors) {
  TempDir dir;
  std::string pipeline = dir.file("composite-only.yaml");
  std::ofstream(pipeline) << "plugins:\n- type: approx-prefix-cache-producer\n"
                             "- type: predicted-latency-producer\n- type: latency-scorer\n"
                             "  parameters: {headroomSelectionStrategy: composite-only}\n"
                             "- type: weighted-random-picker\nschedulingProfiles:\n"
                             "- name: default\n  plugins:\n  - pluginRef: latency-scorer\n"
                             "  - pluginRef: weighted-random-picker\n";
  StackOptions o;
  o.predictors = 1;
  o.pipeline = pipeline;
  start(o);
  stack_->predictors[0]->kill_now();
  for (int i = 0; i < 20; ++i) {
    auto r = stack_->complete(words(30, "c" + std::to_string(i)), 4, i % 2 == 0);
    ASSERT_EQ(r.status, 200) << r.body;
  }
  std::string m = stack_->metrics();
  EXPECT_EQ(metric_sum(m, "llmd_epp_predictor_errors_total{"), 0) << m;
  EXPECT_EQ(metric_sum(m, "llmd_epp_predictor_batch_rows_count"), 0) << m;
  EXPECT_GE(metric_sum(m, "llmd_epp_scheduling_predictions_total{"), 20) << m;
}

// Where requests that no pod is predicted to meet (SLO 0.001 ms) go while earlier ones are still
// in flight, under the shipped default pipeline with `sloMissStrategy` set (and the latency
// scorer's strategy replaced by `strategy` when given).
std::vector<std::string> hopeless_destinations(const TempDir& dir, std::unique_ptr<Stack>& stack,
                                               const std::string& miss_strategy,
                                               const std::string& strategy = "") {
  std::ifstream in(LLMD_SOURCE_DIR "/epp/config/default-pipeline.yaml");
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // latency-composite brings sloMissStrategy: latency-composite unless it is set.
  const std::string key = "headroomSelectionStrategy: latency-composite";
  const auto at = yaml.find(key);
  EXPECT_NE(at, std::string::npos);
  if (at == std::string::npos) {
    return {};
  }
  const auto eol = yaml.find('\n', at);
  yaml.insert(eol + 1, "    sloMissStrategy: " + miss_strategy + "\n");
  if (!strategy.empty()) {
    yaml.replace(at, key.size(), "headroomSelectionStrategy: " + strategy);
  }
  const std::string pipeline = dir.file(miss_strategy + ".yaml");
  std::ofstream(pipeline) << yaml;
  StackOptions o;
  o.pods = 3;
  o.predictors = 1;
  o.pipeline = pipeline;
  stack = std::make_unique<Stack>(std::move(o));
  EXPECT_TRUE(stack->ready) << stack->logs();
  if (!stack->ready) {
    return {};
  }
  // The rule only applies to requests that have predictions: wait until the predictor serves.
  for (int i = 0; i < 100 && metric_sum(stack->metrics(),
                                        "llmd_epp_scheduling_predictions_total{used=\"true\"}") < 1;
       ++i) {
    EXPECT_EQ(stack->complete(words(10, "warm" + std::to_string(i)), 2).status, 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  constexpr int kHopeless = 4;
  std::vector<Json> bodies;
  for (int i = 0; i < kHopeless; ++i) {
    bodies.push_back({{"model", stack->model},
                      {"prompt", words(40, "hopeless" + std::to_string(i))},
                      {"max_tokens", 600},
                      {"stream", true}});
  }
  std::vector<std::string> dest;
  for (const auto& r : send_while_earlier_in_flight(
           *stack, bodies, {{"x-slo-ttft-ms", "0.001"}, {"x-slo-tpot-ms", "0.001"}})) {
    EXPECT_EQ(r.status, 200);
    dest.push_back(r.destination);
  }
  return dest;
}

TEST_F(PolicyStack, SloMissesSpreadByDefaultAndConcentrateOnOnePodWhenConfigured) {
  // Default ("latency-composite"): each miss goes where it costs the pool least and is
  // predicted fastest, so the three pods each get one of the first three.
  TempDir dir;
  auto spread = hopeless_destinations(dir, stack_, "latency-composite");
  ASSERT_EQ(spread.size(), 4u);
  EXPECT_EQ(std::set<std::string>(spread.begin(), spread.begin() + 3).size(), 3u)
      << spread[0] << " " << spread[1] << " " << spread[2];
  stack_.reset();
  // "concentrate": the misses queue behind each other on the busiest pod, leaving the other
  // pods' capacity to requests that can still meet their SLOs.
  auto packed = hopeless_destinations(dir, stack_, "concentrate");
  ASSERT_EQ(packed.size(), 4u);
  std::map<std::string, int> per_pod;
  for (const auto& d : packed) {
    ++per_pod[d];
  }
  int most = 0;
  for (const auto& [pod, n] : per_pod) {
    most = std::max(most, n);
  }
  EXPECT_GE(most, 3) << packed[0] << " " << packed[1] << " " << packed[2] << " " << packed[3];
}

// latency-cost through the real binaries: the pipeline loads with the scorer's other strategy,
// every request is served, and misses spread as under latency-composite (each one's predicted
// TTFT grows with the requests in flight on its pod, and no queue waits yet to weigh a hit).
TEST_F(PolicyStack, LatencyCostServesAndSpreadsMisses) {
  TempDir dir;
  auto spread = hopeless_destinations(dir, stack_, "latency-cost", "latency-cost");
  ASSERT_EQ(spread.size(), 4u);
  EXPECT_EQ(std::set<std::string>(spread.begin(), spread.begin() + 3).size(), 3u)
      << spread[0] << " " << spread[1] << " " << spread[2];
}

}  // namespace
}  // namespace llmd::testing
