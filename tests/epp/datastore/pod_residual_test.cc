// PodResidual and the registry's per-pool factors: deterministic (fixed time points, seeded
// noise).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "epp/datastore/pod_registry.h"

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;

class PodResidualRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<PodConfig> pods;
    for (int i = 0; i < 4; ++i) {
      pods.push_back({"pod-" + std::to_string(i), "10.0.0." + std::to_string(i) + ":8000", {}});
    }
    registry_.set_pods(pods);
    for (const auto& p : pods) {
      PodMetrics m;
      m.scraped_at = t0;
      registry_.update_metrics(p.name, m);
    }
  }
  // `n` first tokens per pod: pod i takes `ratio[i]` times the prediction, times noise.
  void observe(int n, const std::vector<double>& ratio, double noise, std::mt19937& rng) {
    std::lognormal_distribution<double> jitter(0.0, noise);
    for (int k = 0; k < n; ++k) {
      for (std::size_t i = 0; i < ratio.size(); ++i) {
        PodLive& pod = *registry_.live("pod-" + std::to_string(i));
        pod.observe_ttft(100, 100, 100 * ratio[i] * jitter(rng), t0);
        pod.observe_tpot(10, 10, 10 * ratio[i] * jitter(rng), t0);
      }
    }
  }
  double factor(int pod, std::chrono::steady_clock::time_point now = t0, bool tpot = false) {
    for (const auto& e : registry_.candidates(now)) {
      if (e.name() == "pod-" + std::to_string(pod)) {
        return tpot ? e.tpot_residual_factor : e.ttft_residual_factor;
      }
    }
    ADD_FAILURE() << "pod-" << pod << " is not a candidate";
    return 0;
  }
  PodRegistry registry_{std::chrono::hours(1)};
};

TEST_F(PodResidualRegistryTest, APodSlowerThanItsPeersAgainstTheModelIsScaledUp) {
  std::mt19937 rng(1);
  // The shared model under-predicts pod 3 by 2x; the others are as predicted (+-10 %).
  observe(100, {1, 1, 1, 2}, 0.1, rng);
  // Relative to the pool mean of the log ratios (log 2 / 4): 2^0.75 up, 2^-0.25 down.
  EXPECT_NEAR(factor(3), std::pow(2.0, 0.75), 0.06);
  EXPECT_NEAR(factor(3, t0, true), std::pow(2.0, 0.75), 0.06);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(factor(i), std::pow(2.0, -0.25), 0.04) << i;
  }
}

TEST_F(PodResidualRegistryTest, IdenticalPodsWithNoisyLatencyAreLeftAlone) {
  std::mt19937 rng(2);
  observe(200, {1, 1, 1, 1}, 0.6, rng);  // heavy noise, no pod effect
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(factor(i), 1.0) << i;
    EXPECT_EQ(factor(i, t0, true), 1.0) << i;
  }
}

TEST_F(PodResidualRegistryTest, TooFewObservationsChangeNothing) {
  std::mt19937 rng(3);
  observe(static_cast<int>(PodResidual::kMinSamples) - 1, {1, 1, 1, 3}, 0.05, rng);
  EXPECT_EQ(factor(3), 1.0);
  observe(1, {1, 1, 1, 3}, 0.05, rng);
  EXPECT_GT(factor(3), 2.0);
}

TEST_F(PodResidualRegistryTest, OldEvidenceFadesSoAnAvoidedPodComesBack) {
  std::mt19937 rng(4);
  observe(100, {1, 1, 1, 3}, 0.05, rng);
  double now = factor(3), later = factor(3, t0 + PodResidual::kForget),
         much_later = factor(3, t0 + 10 * PodResidual::kForget);
  EXPECT_GT(now, 2.0);
  EXPECT_NEAR(std::log(later), std::log(now) / std::exp(1.0), 0.01);
  EXPECT_NEAR(much_later, 1.0, 0.01);
}

TEST_F(PodResidualRegistryTest, EachPoolIsComparedWithItself) {
  // Pods 0-1 in pool a, 2-3 in pool b: pool b is uniformly 3x slower than predicted (another
  // model, another hardware class), which its own pods share, so nothing is set apart.
  registry_.set_pods({{"pod-0", "10.0.0.0:8000", {{"pool", "a"}}},
                      {"pod-1", "10.0.0.1:8000", {{"pool", "a"}}},
                      {"pod-2", "10.0.0.2:8000", {{"pool", "b"}}},
                      {"pod-3", "10.0.0.3:8000", {{"pool", "b"}}}});
  std::mt19937 rng(5);
  observe(100, {1, 1, 3, 3}, 0.05, rng);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(factor(i), 1.0) << i;
  }
}

TEST(PodResidual, IgnoresUnusableObservationsAndBoundsTheFactor) {
  PodResidual r;
  for (int i = 0; i < 100; ++i) {
    r.add(0, 50, t0);              // no prediction
    r.add(100, std::nan(""), t0);  // no measurement
    r.add(100, -1, t0);
  }
  EXPECT_FALSE(r.counts());
  for (int i = 0; i < 100; ++i) {
    r.add(1, 1e9, t0);  // far beyond any plausible ratio
  }
  EXPECT_DOUBLE_EQ(r.factor(0.0, t0), PodResidual::kMaxFactor);
}

}  // namespace
}  // namespace llmd::epp
