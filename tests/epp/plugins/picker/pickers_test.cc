#include <gtest/gtest.h>

#include "epp/plugins/picker/max_score/max_score_picker.h"
#include "epp/plugins/picker/near_best_rotation/near_best_rotation_picker.h"
#include "epp/plugins/picker/round_robin/round_robin_picker.h"
#include "epp/plugins/picker/weighted_random/weighted_random_picker.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

using testing::FixedRng;

std::vector<ScoredEndpoint> scored(const std::vector<Endpoint>& eps,
                                   const std::vector<double>& scores) {
  std::vector<ScoredEndpoint> out;
  for (std::size_t i = 0; i < eps.size(); ++i) {
    out.push_back({&eps[i], scores[i]});
  }
  return out;
}

std::vector<Endpoint> pods(std::size_t n) {
  std::vector<Endpoint> out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(testing::pod(std::string("p").append(std::to_string(i))));
  }
  return out;
}

TEST(WeightedRandomPickerTest, VectorFrequenciesOverTenThousandPicks) {
  WeightedRandomPicker picker("wr");
  auto eps = pods(5);
  auto s = scored(eps, {100, 90, 50, 30, 20});
  Rng rng(42);
  SchedulingRequest req = testing::request();
  CycleContext ctx{req, rng};
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 10000; ++i) {
    ++counts[picker.pick(ctx, s)];
  }
  const double want[] = {0.345, 0.310, 0.172, 0.103, 0.069};
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(counts[i] / 10000.0, want[i], 0.05) << "pod " << i;
  }
}

TEST(WeightedRandomPickerTest, ScoreExponentConcentratesOnTheBest) {
  WeightedRandomPicker picker("wr", {.scoreExponent = 10});
  auto eps = pods(4);
  auto s = scored(eps, {1.0, 0.9, 0.5, 1e-5});
  Rng rng(3);
  SchedulingRequest req = testing::request();
  CycleContext ctx{req, rng};
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 10000; ++i) {
    ++counts[picker.pick(ctx, s)];
  }
  // 1 : 0.9^10 = 0.349 : 0.5^10 = 0.001 : ~0 -> 74.1%, 25.8%, 0.07%, 0%.
  EXPECT_NEAR(counts[0] / 10000.0, 0.741, 0.02);
  EXPECT_NEAR(counts[1] / 10000.0, 0.258, 0.02);
  EXPECT_LT(counts[2], 30);
  EXPECT_EQ(counts[3], 0);
  // Scores whose 10th power underflows still pick the best of them, not index 0.
  auto tiny = scored(eps, {1e-40, 1e-35, 1e-39, 1e-38});
  EXPECT_EQ(picker.pick(ctx, tiny), 1u);
}

TEST(WeightedRandomPickerTest, ScoreExponentIsValidated) {
  testing::TestServices services;
  auto bad = WeightedRandomPicker::create("wr", {{"scoreExponent", 0}}, services.handle());
  EXPECT_FALSE(bad.plugin);
  EXPECT_NE(bad.error.find("scoreExponent"), std::string::npos) << bad.error;
  auto ok = WeightedRandomPicker::create("wr", {{"scoreExponent", 4}}, services.handle());
  ASSERT_TRUE(ok.plugin) << ok.error;
  EXPECT_DOUBLE_EQ(
      std::dynamic_pointer_cast<const WeightedRandomPicker>(ok.plugin)->config().scoreExponent, 4);
}

TEST(WeightedRandomPickerTest, ZeroScoreIsNeverPickedWhileOthersHaveWeight) {
  WeightedRandomPicker picker("wr");
  auto eps = pods(3);
  auto s = scored(eps, {0, 0.3, 0});
  Rng rng(7);
  SchedulingRequest req = testing::request();
  CycleContext ctx{req, rng};
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(picker.pick(ctx, s), 1u);
  }
}

TEST(WeightedRandomPickerTest, AllZeroIsUniform) {
  WeightedRandomPicker picker("wr");
  auto eps = pods(4);
  auto s = scored(eps, {0, 0, 0, 0});
  FixedRng rng({0.0, 0.3, 0.6, 0.99});
  SchedulingRequest req = testing::request();
  CycleContext ctx{req, rng};
  EXPECT_EQ(picker.pick(ctx, s), 0u);
  EXPECT_EQ(picker.pick(ctx, s), 1u);
  EXPECT_EQ(picker.pick(ctx, s), 2u);
  EXPECT_EQ(picker.pick(ctx, s), 3u);
}

TEST(WeightedRandomPickerTest, LargestKeyWins) {
  WeightedRandomPicker picker("wr");
  auto eps = pods(2);
  auto s = scored(eps, {1.0, 0.5});
  // keys: 0.5^(1/1) = 0.5 vs 0.9^(1/0.5) = 0.81
  FixedRng rng({0.5, 0.9});
  SchedulingRequest req = testing::request();
  CycleContext ctx{req, rng};
  EXPECT_EQ(picker.pick(ctx, s), 1u);
}

TEST(MaxScorePickerTest, PicksHighestAndBreaksTiesAtRandom) {
  MaxScorePicker picker("max");
  auto eps = pods(4);
  SchedulingRequest req = testing::request();
  FixedRng never({}, 0.99);  // never replaces the first of the tied pods
  CycleContext c1{req, never};
  EXPECT_EQ(picker.pick(c1, scored(eps, {0.1, 0.9, 0.3, 0.2})), 1u);
  EXPECT_EQ(picker.pick(c1, scored(eps, {0.9, 0.1, 0.9, 0.9})), 0u);
  FixedRng always({}, 0.0);  // always takes the latest tied pod
  CycleContext c2{req, always};
  EXPECT_EQ(picker.pick(c2, scored(eps, {0.9, 0.1, 0.9, 0.9})), 3u);
  Rng rng(1);
  CycleContext c3{req, rng};
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 3000; ++i) {
    ++counts[picker.pick(c3, scored(eps, {0.5, 0.5, 0.5, 0.1}))];
  }
  EXPECT_EQ(counts[3], 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(counts[i] / 3000.0, 1.0 / 3, 0.05);
  }
}

TEST(RoundRobinPickerTest, CyclesThroughCandidates) {
  RoundRobinPicker picker("rr");
  auto eps = pods(3);
  auto s = scored(eps, {0.9, 0.1, 0.5});
  FixedRng rng;
  SchedulingRequest req = testing::request();
  CycleContext ctx{req, rng};
  std::vector<std::size_t> got;
  for (int i = 0; i < 6; ++i) {
    got.push_back(picker.pick(ctx, s));
  }
  EXPECT_EQ(got, (std::vector<std::size_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(rng.draws, 0);
}

TEST(NearBestRotationPickerTest, RotatesAmongNearBestOnly) {
  NearBestRotationPicker picker("nb", {.tolerance = 0.2});
  auto eps = pods(5);
  // Near-best: >= 0.8 * 1.0 -> pods 0, 1, 3; pod 2 (0.7) and pod 4 (0) are never picked.
  auto s = scored(eps, {1.0, 0.85, 0.7, 0.81, 0.0});
  Rng rng(5);
  SchedulingRequest req = testing::request();
  CycleContext ctx{req, rng};
  std::vector<int> counts(5, 0);
  std::size_t previous = eps.size();
  for (int i = 0; i < 300; ++i) {
    const std::size_t got = picker.pick(ctx, s);
    EXPECT_NE(got, previous) << "two consecutive picks of one pod at pick " << i;
    previous = got;
    ++counts[got];
  }
  // A strict rotation: each near-best pod exactly a third of the picks.
  EXPECT_EQ(counts[0], 100);
  EXPECT_EQ(counts[1], 100);
  EXPECT_EQ(counts[3], 100);
  EXPECT_EQ(counts[2], 0);
  EXPECT_EQ(counts[4], 0);
}

TEST(NearBestRotationPickerTest, ZeroToleranceIsTheBestAndRotationFollowsPodNames) {
  NearBestRotationPicker picker("nb", {.tolerance = 0});
  auto eps = pods(3);
  FixedRng rng({}, 0.99);
  SchedulingRequest req = testing::request();
  CycleContext ctx{req, rng};
  EXPECT_EQ(picker.pick(ctx, scored(eps, {0.2, 0.9, 0.5})), 1u);
  // The history is keyed by pod, not by index: p1 was just picked, so among the tied p1/p2
  // (reordered) the other one goes next, and then p1 again.
  std::vector<Endpoint> reordered = {eps[2], eps[1], eps[0]};
  EXPECT_EQ(picker.pick(ctx, scored(reordered, {0.9, 0.9, 0.1})), 0u);  // p2
  EXPECT_EQ(picker.pick(ctx, scored(reordered, {0.9, 0.9, 0.1})), 1u);  // p1
}

TEST(NearBestRotationPickerTest, AllZeroOrNonFiniteScoresRotateOverEveryPod) {
  NearBestRotationPicker picker("nb", {});
  auto eps = pods(3);
  Rng rng(9);
  SchedulingRequest req = testing::request();
  CycleContext ctx{req, rng};
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 30; ++i) {
    ++counts[picker.pick(ctx, scored(eps, {0, std::nan(""), 0}))];
  }
  EXPECT_EQ(counts, (std::vector<int>{10, 10, 10}));
}

TEST(NearBestRotationPickerTest, PredictedTtftModeIgnoresHowScoresAreNormalised) {
  NearBestRotationPicker picker("nb", {.tolerance = 0.1, .nearBestBy = "predictedTTFT"});
  // Predicted 18.0 / 18.5 / 19.5 / 30 ms: min-max scores would put 18.5 far below 18.0, but
  // by prediction the first three are within 10 % (<= 19.8 ms) and rotate; 30 ms never runs.
  std::vector<Endpoint> eps = {
      testing::predicted("a", -18.0, 0, 0), testing::predicted("b", -18.5, 0, 0),
      testing::predicted("c", -19.5, 0, 0), testing::predicted("d", -30.0, 0, 0)};
  auto s = scored(eps, {1.0, 0.96, 0.86, 0.01});
  Rng rng(2);
  SchedulingRequest req = testing::request();
  CycleContext ctx{req, rng};
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 30; ++i) {
    ++counts[picker.pick(ctx, s)];
  }
  EXPECT_EQ(counts, (std::vector<int>{10, 10, 10, 0}));
  // A pod the scorer gave 0 (another bucket) is not near-best whatever its prediction.
  std::vector<int> zero(4, 0);
  for (int i = 0; i < 20; ++i) {
    ++zero[picker.pick(ctx, scored(eps, {0.0, 0.96, 0.86, 0.01}))];
  }
  EXPECT_EQ(zero[0], 0);
  EXPECT_EQ(zero[3], 0);
  EXPECT_EQ(zero[1] + zero[2], 20);
  // Without predictions the score rule applies.
  auto plain = pods(3);
  EXPECT_EQ(picker.pick(ctx, scored(plain, {0.2, 1.0, 0.5})), 1u);
}

TEST(NearBestRotationPickerTest, EqualPredictionsRotateOverTheBestScoresOnly) {
  // An untrained model predicts the same constant for every pod: by prediction every pod would
  // be near the best and the rotation would be round-robin, blind to what the scorer ranks by.
  NearBestRotationPicker picker(
      "nb", {.tolerance = 0.4, .nearBestBy = "predictedTTFT", .cachedRequestExponent = 10});
  std::vector<Endpoint> eps = {testing::predicted("a", -10.0, 0, 0),
                               testing::predicted("b", -10.0, 0, 0),
                               testing::predicted("c", -10.0, 0, 0)};
  SchedulingRequest req = testing::request();
  Rng rng(5);
  CycleContext ctx{req, rng};
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(picker.pick(ctx, scored(eps, {0.4, 0.9, 0.8})), 1u);  // 0.8 is within 40 %
  }
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 30; ++i) {
    ++counts[picker.pick(ctx, scored(eps, {0.9, 0.9, 0.8}))];
  }
  EXPECT_EQ(counts, (std::vector<int>{15, 15, 0}));
  // A cached request is not drawn ~ score^10 either: the scores carry no prediction.
  eps[0] = testing::with_prefix(testing::predicted("a", -10.0, 0, 0), 3, 4);
  std::vector<int> cached(3, 0);
  for (int i = 0; i < 30; ++i) {
    ++cached[picker.pick(ctx, scored(eps, {1.0, 1.0, 0.3}))];
  }
  EXPECT_EQ(cached, (std::vector<int>{15, 15, 0}));
  // SLO traffic with rotateSloRequests: false keeps its score^10 draw on ties (1 : 0.9^10).
  NearBestRotationPicker slo_picker("nb", {.tolerance = 0.4,
                                           .nearBestBy = "predictedTTFT",
                                           .cachedRequestExponent = 10,
                                           .rotateSloRequests = false});
  SchedulingRequest slo_req = testing::request();
  slo_req.slo_ttft_ms = 100;
  CycleContext slo_ctx{slo_req, rng};
  std::vector<int> drawn(3, 0), rotated(3, 0);
  for (int i = 0; i < 2000; ++i) {
    ++drawn[slo_picker.pick(slo_ctx, scored(eps, {1.0, 0.9, 0.3}))];
    ++rotated[slo_picker.pick(ctx, scored(eps, {1.0, 0.9, 0.3}))];
  }
  EXPECT_GT(drawn[1], 300);
  EXPECT_EQ(rotated, (std::vector<int>{2000, 0, 0}));
  // Distinct predictions (all within 40 % of the best) rotate over every pod again.
  eps = {testing::predicted("a", -10.0, 0, 0), testing::predicted("b", -10.0, 0, 0),
         testing::predicted("c", -11.0, 0, 0)};
  std::vector<int> rot(3, 0);
  for (int i = 0; i < 30; ++i) {
    ++rot[picker.pick(ctx, scored(eps, {0.4, 0.9, 0.5}))];
  }
  EXPECT_EQ(rot, (std::vector<int>{10, 10, 10}));
}

TEST(NearBestRotationPickerTest, CachedRequestsAreDrawnByScoreAndOthersRotate) {
  NearBestRotationPicker picker("nb", {.tolerance = 1.0, .cachedRequestExponent = 10});
  SchedulingRequest req = testing::request();
  Rng rng(4);
  CycleContext ctx{req, rng};
  // No candidate holds the prompt: tolerance 1 makes every positive pod near-best, so the
  // rotation visits each in turn.
  auto cold = pods(3);
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 30; ++i) {
    ++counts[picker.pick(ctx, scored(cold, {1.0, 0.5, 0.1}))];
  }
  EXPECT_EQ(counts, (std::vector<int>{10, 10, 10}));
  // One pod holds part of it: picks follow score^10 (1 : 0.5^10 : 0.1^10), no rotation.
  std::vector<Endpoint> warm = {testing::with_prefix(testing::pod("p0"), 3, 4), testing::pod("p1"),
                                testing::pod("p2")};
  std::vector<int> hot(3, 0);
  for (int i = 0; i < 2000; ++i) {
    ++hot[picker.pick(ctx, scored(warm, {1.0, 0.5, 0.1}))];
  }
  EXPECT_GT(hot[0], 1980);
  EXPECT_EQ(hot[2], 0);
  EXPECT_EQ(picker.consumes().size(), 1u);
}

TEST(NearBestRotationPickerTest, SloRequestsCanBeDrawnInsteadOfRotated) {
  NearBestRotationPicker picker(
      "nb", {.tolerance = 1.0, .cachedRequestExponent = 10, .rotateSloRequests = false});
  auto eps = pods(3);
  auto s = scored(eps, {1.0, 0.5, 0.1});
  Rng rng(6);
  SchedulingRequest req = testing::request();
  CycleContext ctx{req, rng};
  std::vector<int> plain(3, 0);
  for (int i = 0; i < 30; ++i) {
    ++plain[picker.pick(ctx, s)];
  }
  EXPECT_EQ(plain, (std::vector<int>{10, 10, 10}));  // no SLO headers: rotation
  req.slo_ttft_ms = 200;
  std::vector<int> slo(3, 0);
  for (int i = 0; i < 2000; ++i) {
    ++slo[picker.pick(ctx, s)];
  }
  EXPECT_GT(slo[0], 1980);  // ~ score^10
  testing::TestServices services;
  // A softer k for SLO requests no pod has cached: 1 : 0.5^2 : 0.1^2 (~79 %, 20 %, 1 %); a
  // cached SLO request keeps the sharp k.
  NearBestRotationPicker soft("nb", {.tolerance = 1.0,
                                     .cachedRequestExponent = 100,
                                     .rotateSloRequests = false,
                                     .uncachedSloRequestExponent = 2});
  std::vector<int> uncached(3, 0), cached(3, 0);
  auto warm = eps;
  warm[1] = testing::with_prefix(warm[1], 1, 4);
  for (int i = 0; i < 2000; ++i) {
    ++uncached[soft.pick(ctx, s)];
    ++cached[soft.pick(ctx, scored(warm, {1.0, 0.5, 0.1}))];
  }
  EXPECT_GT(uncached[1], 300);
  EXPECT_GT(uncached[2], 0);
  EXPECT_EQ(cached[0], 2000);  // 0.5^100: never
  EXPECT_FALSE(
      NearBestRotationPicker::create("nb", {{"uncachedSloRequestExponent", 101}}, services.handle())
          .plugin);
  auto bad =
      NearBestRotationPicker::create("nb", {{"rotateSloRequests", false}}, services.handle());
  EXPECT_FALSE(bad.plugin);
  EXPECT_NE(bad.error.find("cachedRequestExponent"), std::string::npos) << bad.error;
}

TEST(NearBestRotationPickerTest, ToleranceIsValidated) {
  testing::TestServices services;
  auto h = services.handle();
  for (double bad : {-0.1, 1.5}) {
    auto r = NearBestRotationPicker::create("nb", {{"tolerance", bad}}, h);
    EXPECT_FALSE(r.plugin);
    EXPECT_NE(r.error.find("tolerance"), std::string::npos) << r.error;
  }
  EXPECT_FALSE(NearBestRotationPicker::create("nb", {{"tolerence", 0.1}}, h).plugin);
  EXPECT_FALSE(NearBestRotationPicker::create("nb", {{"nearBestBy", "rank"}}, h).plugin);
  EXPECT_FALSE(NearBestRotationPicker::create("nb", {{"cachedRequestExponent", -1}}, h).plugin);
  EXPECT_TRUE(NearBestRotationPicker::create("nb", {{"tolerance", 0.25}}, h).plugin);
  EXPECT_TRUE(NearBestRotationPicker::create("nb", nullptr, h).plugin);
  // An exponent for uncached SLO requests draws SLO requests, unless they are told to rotate.
  auto drawn = NearBestRotationPicker::create(
      "nb", {{"cachedRequestExponent", 100}, {"uncachedSloRequestExponent", 10}}, h);
  ASSERT_TRUE(drawn.plugin) << drawn.error;
  EXPECT_FALSE(std::dynamic_pointer_cast<const NearBestRotationPicker>(drawn.plugin)
                   ->config()
                   .rotateSloRequests);
  auto rotated = NearBestRotationPicker::create("nb",
                                                {{"cachedRequestExponent", 100},
                                                 {"uncachedSloRequestExponent", 10},
                                                 {"rotateSloRequests", true}},
                                                h);
  ASSERT_TRUE(rotated.plugin) << rotated.error;
  EXPECT_TRUE(std::dynamic_pointer_cast<const NearBestRotationPicker>(rotated.plugin)
                  ->config()
                  .rotateSloRequests);
}

TEST(PickerFactoriesTest, RejectUnknownParameters) {
  testing::TestServices services;
  auto h = services.handle();
  EXPECT_FALSE(WeightedRandomPicker::create("x", {{"maxNumOfEndpoints", 2}}, h).plugin);
  EXPECT_FALSE(MaxScorePicker::create("x", {{"foo", 1}}, h).plugin);
  EXPECT_TRUE(RoundRobinPicker::create("x", nullptr, h).plugin);
}

}  // namespace
}  // namespace llmd::epp
