#include "epp/queue/saturation.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace llmd::epp {
namespace {

Endpoint pod(std::string name, int64_t waiting = 0, double kv = 0) {
  PodInfo info;
  info.name = std::move(name);
  info.metrics.waiting = waiting;
  info.metrics.kv_cache_usage = kv;
  return Endpoint::of(std::move(info));
}

SaturationThresholds none() {
  return SaturationThresholds{};
}

TEST(PodSaturatedTest, PrefillFractionOfMaxBatchedTokens) {
  auto t = none();
  t.prefill_fraction = 2.0;
  auto e = pod("a");
  e.prefill_tokens_in_flight = 16383;  // 1.9999 x 8192
  EXPECT_FALSE(pod_saturated(e, t, std::nullopt));
  e.prefill_tokens_in_flight = 16384;
  EXPECT_TRUE(pod_saturated(e, t, std::nullopt));
  t.max_batched_tokens = 16384;
  EXPECT_FALSE(pod_saturated(e, t, std::nullopt));
}

TEST(PodSaturatedTest, InFlightRequests) {
  auto t = none();
  t.in_flight_requests = 8;
  auto e = pod("a");
  e.dispatched = 7;
  EXPECT_FALSE(pod_saturated(e, t, std::nullopt));
  e.dispatched = 8;
  EXPECT_TRUE(pod_saturated(e, t, std::nullopt));
}

TEST(PodSaturatedTest, WaitingRequests) {
  auto t = none();
  t.waiting_requests = 5;
  EXPECT_FALSE(pod_saturated(pod("a", 4), t, std::nullopt));
  EXPECT_TRUE(pod_saturated(pod("a", 5), t, std::nullopt));
}

TEST(PodSaturatedTest, KvCacheUsage) {
  auto t = none();
  t.kv_cache_usage = 0.9;
  EXPECT_FALSE(pod_saturated(pod("a", 0, 0.89), t, std::nullopt));
  EXPECT_TRUE(pod_saturated(pod("a", 0, 0.9), t, std::nullopt));
}

TEST(PodSaturatedTest, PredictedTtftOnlyWhenKnown) {
  auto t = none();
  t.predicted_ttft_ms = 2000;
  auto e = pod("a");
  EXPECT_FALSE(pod_saturated(e, t, std::nullopt));
  EXPECT_FALSE(pod_saturated(e, t, 1999.0));
  EXPECT_TRUE(pod_saturated(e, t, 2000.0));
}

TEST(PodSaturatedTest, AnyLimitIsEnoughAndNoLimitNeverSaturates) {
  auto e = pod("a", 100, 1.0);
  e.dispatched = 100;
  e.prefill_tokens_in_flight = 1 << 20;
  EXPECT_FALSE(pod_saturated(e, none(), 1e9));
  EXPECT_FALSE(none().any());
  SaturationThresholds t;
  t.waiting_requests = 5;       // reached
  t.kv_cache_usage = 1.0;       // reached too
  t.in_flight_requests = 1000;  // not reached
  EXPECT_TRUE(t.any());
  e.info = pod("a", 100, 0.1).info;
  EXPECT_TRUE(pod_saturated(e, t, std::nullopt));
  e.info = pod("a", 0, 0.1).info;
  EXPECT_FALSE(pod_saturated(e, t, std::nullopt));
}

TEST(PoolSaturatedTest, OnlyWhenEveryPodIs) {
  SaturationThresholds t;
  t.waiting_requests = 2;
  std::vector<Endpoint> pods = {pod("a", 3), pod("b", 3), pod("c", 3)};
  EXPECT_TRUE(pool_saturated(pods, t));
  pods[1] = pod("b", 1);
  EXPECT_FALSE(pool_saturated(pods, t));
}

TEST(PoolSaturatedTest, EmptyPoolIsNotSaturated) {
  SaturationThresholds t;
  t.waiting_requests = 1;
  EXPECT_FALSE(pool_saturated({}, t));
}

TEST(PoolSaturatedTest, PredictedTtftFromLookupOrEndpointAttribute) {
  SaturationThresholds t;
  t.predicted_ttft_ms = 1000;
  std::vector<Endpoint> pods = {pod("a"), pod("b")};
  std::map<std::string, double> ttft = {{"a", 1500}, {"b", 1200}};
  PredictedTtftLookup lookup = [&](const Endpoint& e) -> std::optional<double> {
    auto it = ttft.find(e.name());
    return it == ttft.end() ? std::nullopt : std::optional<double>(it->second);
  };
  EXPECT_TRUE(pool_saturated(pods, t, lookup));
  ttft.erase("b");  // unknown TTFT: that pod is not saturated by this limit
  EXPECT_FALSE(pool_saturated(pods, t, lookup));
  // Without a lookup, the predicted-latency producer's attribute is read.
  EXPECT_FALSE(pool_saturated(pods, t));
  for (auto& e : pods) {
    e.latency = LatencyPredictionInfo{};
    e.latency->predicted_ttft_ms = 1000;
  }
  EXPECT_TRUE(pool_saturated(pods, t));
}

}  // namespace
}  // namespace llmd::epp
