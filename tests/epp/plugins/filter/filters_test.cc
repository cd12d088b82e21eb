#include <gtest/gtest.h>

#include "epp/plugins/filter/prefix_cache_affinity/prefix_cache_affinity_filter.h"
#include "epp/plugins/filter/slo_headroom_tier/slo_headroom_tier_filter.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

using testing::FixedRng;
using testing::pod;
using testing::predicted;
using testing::with_prefix;

std::vector<std::string> names(const std::vector<Endpoint>& eps) {
  std::vector<std::string> out;
  for (const auto& e : eps) {
    out.push_back(e.name());
  }
  return out;
}

using Names = std::vector<std::string>;

class AffinityFilterTest : public ::testing::Test {
 protected:
  Names run(const PrefixCacheAffinityFilter& f, std::vector<Endpoint> eps, FixedRng& rng) {
    CycleContext ctx{req_, rng};
    return names(f.filter(ctx, std::move(eps)));
  }
  // The gate alone: without the queue escape (its own test below).
  PrefixCacheAffinityFilter make(double threshold, double explore = 0, double penalty = 5000) {
    return PrefixCacheAffinityFilter("aff", {threshold, explore, penalty, false});
  }
  SchedulingRequest req_ = testing::request();
};

TEST_F(AffinityFilterTest, KeepsStickyPodsAtOrAboveThreshold) {
  FixedRng rng;
  auto f = make(0.80);
  EXPECT_EQ(run(f,
                {with_prefix(pod("a"), 8, 10), with_prefix(pod("b"), 7, 10),
                 with_prefix(pod("c"), 10, 10), pod("d")},
                rng),
            (Names{"a", "c"}));
  auto strict = make(0.99);
  EXPECT_EQ(run(strict, {with_prefix(pod("a"), 8, 10), with_prefix(pod("c"), 10, 10)}, rng),
            (Names{"c"}));
  EXPECT_EQ(rng.draws, 0);  // explorationProbability 0 never draws
}

TEST_F(AffinityFilterTest, NoStickyPodKeepsAll) {
  FixedRng rng;
  EXPECT_EQ(run(make(0.8), {with_prefix(pod("a"), 1, 10), pod("b")}, rng), (Names{"a", "b"}));
}

TEST_F(AffinityFilterTest, ExplorationSkipsTheGate) {
  auto f = make(0.8, 0.01);
  FixedRng explore({0.005});
  EXPECT_EQ(run(f, {with_prefix(pod("a"), 9, 10), pod("b")}, explore), (Names{"a", "b"}));
  FixedRng exploit({0.5});
  EXPECT_EQ(run(f, {with_prefix(pod("a"), 9, 10), pod("b")}, exploit), (Names{"a"}));
}

TEST_F(AffinityFilterTest, TtftPenaltyBreaksStickiness) {
  FixedRng rng;
  auto f = make(0.8, 0, 5000);
  // predicted() sets predicted TTFT = -ttft headroom.
  auto sticky_slow = with_prefix(predicted("sticky", -6000, 0, 1), 10, 10);
  auto other_fast = predicted("other", -500, 0, 1);
  EXPECT_EQ(run(f, {sticky_slow, other_fast}, rng), (Names{"sticky", "other"}));
  auto sticky_ok = with_prefix(predicted("sticky", -5400, 0, 1), 10, 10);
  EXPECT_EQ(run(f, {sticky_ok, other_fast}, rng), (Names{"sticky"}));  // 4900 <= 5000
  auto zero = make(0.8, 0, 0);                                         // 0 = always stick
  EXPECT_EQ(run(zero, {sticky_slow, other_fast}, rng), (Names{"sticky"}));
}

TEST_F(AffinityFilterTest, QueueEscapeKeepsAllWhenEveryStickyPodQueuesAndAnotherDoesNot) {
  FixedRng rng;
  PrefixCacheAffinityFilter::Config c{0.8, 0, 5000};
  c.queueEscape = true;
  PrefixCacheAffinityFilter f("aff", c);
  // The sticky pods' predictions look fine (the model has not seen their slot limit): only the
  // scraped queue says the cache hit would wait.
  auto queued_a = with_prefix(pod("a", 0.3, 4), 10, 10);
  auto queued_b = with_prefix(pod("b", 0.3, 1), 9, 10);
  EXPECT_EQ(run(f, {queued_a, queued_b, pod("c", 0.3, 0)}, rng), (Names{"a", "b", "c"}));
  // One sticky pod without a queue: stickiness stays.
  EXPECT_EQ(run(f, {queued_a, with_prefix(pod("b", 0.3, 0), 9, 10), pod("c", 0.3, 0)}, rng),
            (Names{"a", "b"}));
  // Every other pod queues too: nothing is gained by leaving.
  EXPECT_EQ(run(f, {queued_a, pod("c", 0.3, 2)}, rng), (Names{"a"}));
  // Off (the default): the queue does not matter.
  EXPECT_EQ(run(make(0.8), {queued_a, pod("c", 0.3, 0)}, rng), (Names{"a"}));
}

TEST_F(AffinityFilterTest, WithoutPredictionsStickinessStays) {
  FixedRng rng;
  EXPECT_EQ(run(make(0.8), {with_prefix(pod("a"), 10, 10), pod("b")}, rng), (Names{"a"}));
}

TEST_F(AffinityFilterTest, FactoryDefaultsAliasAndValidation) {
  testing::TestServices s;
  auto h = s.handle();
  auto made = PrefixCacheAffinityFilter::create("strict", {{"threshold", 0.99}}, h);
  ASSERT_TRUE(made.plugin) << made.error;
  const auto& c = std::dynamic_pointer_cast<const PrefixCacheAffinityFilter>(made.plugin)->config();
  EXPECT_DOUBLE_EQ(c.threshold, 0.99);
  EXPECT_DOUBLE_EQ(c.explorationProbability, 0.01);  // partial params keep the defaults
  EXPECT_DOUBLE_EQ(c.maxTTFTPenaltyMs, 0);           // ours: no predicted break (upstream 5000)
  EXPECT_TRUE(c.queueEscape);                        // ours (upstream has none)
  auto up = PrefixCacheAffinityFilter::create(
      "x", {{"queueEscape", false}, {"maxTTFTPenaltyMs", 5000}}, h);
  ASSERT_TRUE(up.plugin) << up.error;
  const auto& uc = std::dynamic_pointer_cast<const PrefixCacheAffinityFilter>(up.plugin)->config();
  EXPECT_FALSE(uc.queueEscape);
  EXPECT_DOUBLE_EQ(uc.maxTTFTPenaltyMs, 5000);
  EXPECT_TRUE(PrefixCacheAffinityFilter::create("x", {{"affinityThreshold", 0.5}}, h).plugin);
  auto both =
      PrefixCacheAffinityFilter::create("x", {{"threshold", 0.5}, {"affinityThreshold", 0.5}}, h);
  EXPECT_FALSE(both.plugin);
  auto bad = PrefixCacheAffinityFilter::create("x", {{"threshold", 1.5}}, h);
  EXPECT_EQ(bad.error, "parameter 'threshold' must be in [0, 1], got 1.5");
}

class TierFilterTest : public ::testing::Test {
 protected:
  Names run(double eps_neg, std::vector<Endpoint> eps, FixedRng& rng) {
    SloHeadroomTierFilter f("tier", {eps_neg});
    CycleContext ctx{req_, rng};
    return names(f.filter(ctx, std::move(eps)));
  }
  SchedulingRequest req_ = testing::request();
};

TEST_F(TierFilterTest, KeepsPositiveTierUnlessExploring) {
  std::vector<Endpoint> eps = {predicted("pos", 10, 0, 1), predicted("neg", -10, 5, 1),
                               predicted("tpotneg", 10, -1, 1), pod("none")};
  FixedRng exploit({0.5});
  EXPECT_EQ(run(0.01, eps, exploit), (Names{"pos"}));
  FixedRng explore({0.001});
  EXPECT_EQ(run(0.01, eps, explore), (Names{"neg", "tpotneg", "none"}));
}

TEST_F(TierFilterTest, SingleTierOrNoPredictionsKeepsWhatThereIs) {
  FixedRng rng;
  EXPECT_EQ(run(0.01, {predicted("a", -1, 0, 1), predicted("b", -2, 0, 1)}, rng),
            (Names{"a", "b"}));
  EXPECT_EQ(run(0.01, {predicted("a", 1, 0, 1), predicted("b", 2, 0, 1)}, rng), (Names{"a", "b"}));
  EXPECT_EQ(run(0.01, {pod("a"), pod("b")}, rng), (Names{"a", "b"}));
  EXPECT_EQ(rng.draws, 0);  // no draw when there is no choice
}

TEST_F(TierFilterTest, FactoryValidates) {
  testing::TestServices s;
  auto h = s.handle();
  EXPECT_TRUE(SloHeadroomTierFilter::create("t", nullptr, h).plugin);
  EXPECT_FALSE(SloHeadroomTierFilter::create("t", {{"epsilonExploreNeg", -0.1}}, h).plugin);
}

}  // namespace
}  // namespace llmd::epp
