// BoundCoverage and the registry's per-pool bound factors: deterministic (fixed sequences).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "epp/datastore/bound_coverage.h"
#include "epp/datastore/pod_registry.h"

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;

// Actuals at bound x (k / 100) for k = 1..n: the share of bounds that held is known exactly.
void feed_ratios(BoundCoverage& c, int n, double scale) {
  for (int k = 1; k <= n; ++k) {
    c.add(99.0, 100.0 * scale * k / n - 1.0);  // (actual + 1) / (bound + 1) = scale * k / n
  }
}

TEST(BoundCoverageTest, FactorIsTheNinetiethPercentileOfActualOverBound) {
  BoundCoverage c;
  EXPECT_DOUBLE_EQ(c.factor(), 1.0);
  // Ratios 0.025..2.0 (80 of them, a multiple of kRecomputeEvery): 90 % are at or below 1.8.
  feed_ratios(c, 80, 2.0);
  EXPECT_NEAR(c.factor(), 1.8, 1e-5);
}

TEST(BoundCoverageTest, StaysOneUntilEnoughObservationsAndIgnoresGarbage) {
  BoundCoverage c;
  for (std::size_t i = 0; i + 1 < BoundCoverage::kMinSamples; ++i) {
    c.add(10, 30);
  }
  EXPECT_DOUBLE_EQ(c.factor(), 1.0);
  c.add(0, 30);   // no bound
  c.add(-5, 30);  // negative bound
  c.add(10, -1);  // negative actual
  c.add(10, std::nan(""));
  c.add(std::numeric_limits<double>::infinity(), 1);
  EXPECT_EQ(c.size(), BoundCoverage::kMinSamples - 1);
  for (std::size_t i = 0; i < BoundCoverage::kRecomputeEvery; ++i) {
    c.add(10, 30);
  }
  EXPECT_NEAR(c.factor(), 31.0 / 11.0, 1e-5);
}

TEST(BoundCoverageTest, FollowsTheLatestWindowAndIsClamped) {
  BoundCoverage c;
  feed_ratios(c, static_cast<int>(BoundCoverage::kWindow), 2.0);
  EXPECT_GT(c.factor(), 1.5);
  // A full window of bounds that held with room to spare replaces it: the factor falls,
  // but never below kMinFactor.
  for (std::size_t i = 0; i < BoundCoverage::kWindow; ++i) {
    c.add(99, 9);  // ratio 0.1
  }
  EXPECT_DOUBLE_EQ(c.factor(), BoundCoverage::kMinFactor);
  for (std::size_t i = 0; i < BoundCoverage::kWindow; ++i) {
    c.add(9, 999);  // ratio 100
  }
  EXPECT_DOUBLE_EQ(c.factor(), BoundCoverage::kMaxFactor);
}

TEST(BoundCoverageTest, RegistryKeepsOneFactorPerPoolAndCandidatesCarryIt) {
  PodRegistry registry(std::chrono::hours(1));
  registry.set_pods({{"a1", "10.0.0.1:8000", {{"pool", "a"}}},
                     {"a2", "10.0.0.2:8000", {{"pool", "a"}}},
                     {"b1", "10.0.0.3:8000", {{"pool", "b"}}}});
  for (const char* p : {"a1", "a2", "b1"}) {
    PodMetrics m;
    m.scraped_at = t0;
    registry.update_metrics(p, m);
  }
  // Pool a's TTFT bounds held only at 2x (spread over both pods); its TPOT bounds held, and
  // pool b saw nothing.
  for (int i = 0; i < 128; ++i) {
    registry.live(i % 2 ? "a1" : "a2")->observe_ttft(49, 49, 99, t0);
    registry.live("a1")->observe_tpot(9, 9, 4, t0);
  }
  EXPECT_EQ(registry.live("unknown-pod"), nullptr);
  for (const auto& e : registry.candidates(t0)) {
    if (e.pool() == "a") {
      EXPECT_DOUBLE_EQ(e.ttft_bound_factor, 2.0) << e.name();
      EXPECT_DOUBLE_EQ(e.tpot_bound_factor, 0.5) << e.name();
    } else {
      EXPECT_DOUBLE_EQ(e.ttft_bound_factor, 1.0) << e.name();
      EXPECT_DOUBLE_EQ(e.tpot_bound_factor, 1.0) << e.name();
    }
  }
}

}  // namespace
}  // namespace llmd::epp
