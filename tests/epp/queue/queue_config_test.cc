#include "epp/queue/queue_config.h"

#include <gtest/gtest.h>

#include "epp/scheduler/yaml_json.h"

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

RouterQueueConfig ok(const json& j) {
  auto r = parse_router_queue_config(j);
  if (auto* e = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << *e;
    return {};
  }
  return std::get<RouterQueueConfig>(r);
}

std::string error(const json& j) {
  auto r = parse_router_queue_config(j);
  auto* e = std::get_if<std::string>(&r);
  return e ? *e : "(accepted)";
}

void expect_defaults(const RouterQueueConfig& c) {
  EXPECT_EQ(c.queue.policy, QueuePolicy::kFcfs);
  EXPECT_EQ(c.queue.max_size, 1000u);
  EXPECT_EQ(c.queue.timeout, 30000ms);
  EXPECT_EQ(c.queue.priority_bump, 1000ms);
  EXPECT_FALSE(c.queue.default_deadline);
  EXPECT_EQ(c.saturation.prefill_fraction, 2.0);
  EXPECT_EQ(c.saturation.max_batched_tokens, 8192);
  EXPECT_FALSE(c.saturation.in_flight_requests || c.saturation.waiting_requests ||
               c.saturation.kv_cache_usage || c.saturation.predicted_ttft_ms);
}

TEST(RouterQueueConfigTest, AbsentOrEmptySectionGivesDefaults) {
  expect_defaults(ok(json()));
  expect_defaults(ok(json::object()));
}

TEST(RouterQueueConfigTest, PartialConfigKeepsOtherDefaults) {
  auto c = ok(json{{"policy", "wspt"}});
  EXPECT_EQ(c.queue.policy, QueuePolicy::kWspt);
  c.queue.policy = QueuePolicy::kFcfs;
  expect_defaults(c);
}

TEST(RouterQueueConfigTest, NumberThresholdIsDynamosPrefillFraction) {
  auto c = ok(yaml_to_json(YAML::Load(R"(
policy: slo-deadline
routerQueueThreshold: 1.5
maxSize: 20
timeoutMs: 5000
priorityBumpMs: 0
defaultDeadlineMs: 800
)")));
  EXPECT_EQ(c.queue.policy, QueuePolicy::kSloDeadline);
  EXPECT_EQ(c.saturation.prefill_fraction, 1.5);
  EXPECT_EQ(c.saturation.max_batched_tokens, 8192);
  EXPECT_EQ(c.queue.max_size, 20u);
  EXPECT_EQ(c.queue.timeout, 5000ms);
  EXPECT_EQ(c.queue.priority_bump, 0ms);
  EXPECT_EQ(c.queue.default_deadline, 800ms);
  EXPECT_EQ(ok(json{{"routerQueueThreshold", 3}}).saturation.prefill_fraction, 3.0);
}

TEST(RouterQueueConfigTest, MapThresholdSetsExactlyTheGivenLimits) {
  auto c = ok(yaml_to_json(YAML::Load(R"(
routerQueueThreshold: {prefillFraction: 2.0, maxBatchedTokens: 4096, inFlightRequests: 8,
                       waitingRequests: 5, kvCacheUsage: 0.9, predictedTtftMs: 2000}
)")));
  EXPECT_EQ(c.saturation.prefill_fraction, 2.0);
  EXPECT_EQ(c.saturation.max_batched_tokens, 4096);
  EXPECT_EQ(c.saturation.in_flight_requests, 8);
  EXPECT_EQ(c.saturation.waiting_requests, 5);
  EXPECT_EQ(c.saturation.kv_cache_usage, 0.9);
  EXPECT_EQ(c.saturation.predicted_ttft_ms, 2000.0);
  // Limits not given are off, including Dynamo's default prefill fraction.
  auto w = ok(json{{"routerQueueThreshold", {{"waitingRequests", 5.0}}}});
  EXPECT_FALSE(w.saturation.prefill_fraction);
  EXPECT_EQ(w.saturation.waiting_requests, 5);
  EXPECT_EQ(ok(json{{"routerQueueThreshold", {{"kvCacheUsage", 1}}}}).saturation.kv_cache_usage,
            1.0);
}

TEST(RouterQueueConfigTest, ErrorsNameTheKeyAndTheValue) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::array(), "routerQueue: expected a map, got []"},
      {{{"policy", "x"}}, "routerQueue.policy: expected fcfs, lcfs, wspt or slo-deadline, got 'x'"},
      {{{"policy", 1}}, "routerQueue.policy: expected fcfs, lcfs, wspt or slo-deadline, got 1"},
      {{{"polcy", "fcfs"}}, "routerQueue: unknown key 'polcy'"},
      {{{"maxSize", 0}}, "routerQueue.maxSize: expected a positive integer, got 0"},
      {{{"maxSize", 1.5}}, "routerQueue.maxSize: expected a positive integer, got 1.5"},
      {{{"maxSize", "10"}}, "routerQueue.maxSize: expected a positive integer, got '10'"},
      {{{"timeoutMs", -1}},
       "routerQueue.timeoutMs: expected a whole number of milliseconds in [1, 31536000000], "
       "got -1"},
      {{{"timeoutMs", 1e12}},
       "routerQueue.timeoutMs: expected a whole number of milliseconds in [1, 31536000000], "
       "got 1000000000000.0"},
      {{{"priorityBumpMs", -5}},
       "routerQueue.priorityBumpMs: expected a whole number of milliseconds in [0, 31536000000], "
       "got -5"},
      {{{"defaultDeadlineMs", 0}},
       "routerQueue.defaultDeadlineMs: expected a whole number of milliseconds in "
       "[1, 31536000000], got 0"},
      {{{"routerQueueThreshold", 0}},
       "routerQueue.routerQueueThreshold: expected a positive number, got 0"},
      {{{"routerQueueThreshold", true}},
       "routerQueue.routerQueueThreshold: expected a number (prefill fraction) or a map of "
       "limits, got true"},
      {{{"routerQueueThreshold", json::object()}},
       "routerQueue.routerQueueThreshold: set at least one limit (prefillFraction, "
       "inFlightRequests, waitingRequests, kvCacheUsage or predictedTtftMs)"},
      {{{"routerQueueThreshold", {{"maxBatchedTokens", 4096}}}},
       "routerQueue.routerQueueThreshold: set at least one limit (prefillFraction, "
       "inFlightRequests, waitingRequests, kvCacheUsage or predictedTtftMs)"},
      {{{"routerQueueThreshold", {{"maxBatchedTokens", 4096}, {"waitingRequests", 5}}}},
       "routerQueue.routerQueueThreshold: maxBatchedTokens only applies with prefillFraction"},
      {{{"routerQueueThreshold", {{"waiting", 5}}}},
       "routerQueue.routerQueueThreshold: unknown key 'waiting'"},
      {{{"routerQueueThreshold", {{"prefillFraction", -2}}}},
       "routerQueue.routerQueueThreshold.prefillFraction: expected a positive number, got -2"},
      {{{"routerQueueThreshold", {{"maxBatchedTokens", 0}, {"prefillFraction", 2}}}},
       "routerQueue.routerQueueThreshold.maxBatchedTokens: expected a positive integer, got 0"},
      {{{"routerQueueThreshold", {{"inFlightRequests", 0}}}},
       "routerQueue.routerQueueThreshold.inFlightRequests: expected a positive integer, got 0"},
      {{{"routerQueueThreshold", {{"waitingRequests", 2.5}}}},
       "routerQueue.routerQueueThreshold.waitingRequests: expected a positive integer, got 2.5"},
      {{{"routerQueueThreshold", {{"kvCacheUsage", 1.5}}}},
       "routerQueue.routerQueueThreshold.kvCacheUsage: expected a number in (0, 1], got 1.5"},
      {{{"routerQueueThreshold", {{"predictedTtftMs", "fast"}}}},
       "routerQueue.routerQueueThreshold.predictedTtftMs: expected a positive number, got "
       "'fast'"},
  };
  for (const auto& [j, want] : cases) {
    EXPECT_EQ(error(j), want) << j.dump();
  }
}

}  // namespace
}  // namespace llmd::epp
