// One test per scoring vector of spec section 2 (default config unless the vector says so).
#include "epp/plugins/scorer/latency/latency_scorer.h"

#include <gtest/gtest.h>

#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

using testing::FixedRng;
using testing::pod;
using testing::predicted;
using testing::with_info;
using testing::with_prefix;

class LatencyScorerTest : public ::testing::Test {
 protected:
  std::shared_ptr<const LatencyScorer> make(nlohmann::json params = nullptr) {
    auto made = LatencyScorer::create("latency-scorer", params, services_.handle());
    EXPECT_TRUE(made.plugin) << made.error;
    return std::dynamic_pointer_cast<const LatencyScorer>(made.plugin);
  }
  std::vector<double> score(const LatencyScorer& s, const std::vector<Endpoint>& eps) {
    CycleContext ctx{req_, rng_};
    return s.score(ctx, eps);
  }
  void expect_scores(const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-9) << "pod " << i;
    }
  }
  testing::TestServices services_;
  SchedulingRequest req_ = testing::request();
  FixedRng rng_;
};

TEST_F(LatencyScorerTest, VectorLeast) {
  auto s = make();
  expect_scores(score(*s, {predicted("a", 100, 20, 0), predicted("b", 30, 5, 0)}), {0.01, 1.0});
}

TEST_F(LatencyScorerTest, VectorMost) {
  auto s = make({{"headroomSelectionStrategy", "most"}});
  expect_scores(score(*s, {predicted("a", 100, 20, 0), predicted("b", 30, 5, 0)}), {1.0, 0.01});
}

TEST_F(LatencyScorerTest, VectorBothNegativeAndIdle) {
  auto s = make();
  expect_scores(score(*s, {predicted("a", -10, -5, 0), predicted("b", -100, -30, 0)}), {1.0, 0.01});
}

TEST_F(LatencyScorerTest, VectorBusyVersusIdle) {
  auto s = make();
  expect_scores(score(*s, {predicted("busy", -50, -10, 5), predicted("idle", -50, -10, 0)}),
                {0.0, 0.51});
}

TEST_F(LatencyScorerTest, VectorIdenticalGoesToTheComposite) {
  // Upstream scores 0.51 each (a coin toss); equal predictions defer to load and prefix.
  auto s = make();
  const std::vector<Endpoint> eps = {predicted("a", 50, 10, 1), predicted("b", 50, 10, 1)};
  expect_scores(score(*s, eps),
                score(*make({{"headroomSelectionStrategy", "composite-only"}}), eps));
}

TEST_F(LatencyScorerTest, RatioNormalizationFollowsRelativeDifferences) {
  auto s = make({{"normalization", "ratio"}});
  // No SLO: headroom = -predicted; 18.0 vs 18.5 ms are near-equals, 36 ms is twice as slow.
  auto got = score(
      *s, {predicted("a", -18.0, 0, 1), predicted("b", -18.5, 0, 1), predicted("c", -36.0, 0, 1)});
  EXPECT_NEAR(got[0], 1.0, 1e-9);
  EXPECT_NEAR(got[1], 18.0 / 18.5, 1e-9);
  EXPECT_NEAR(got[2], 0.5, 1e-9);
  auto minmax = score(*make(), {predicted("a", -18.0, 0, 1), predicted("b", -18.5, 0, 1),
                                predicted("c", -36.0, 0, 1)});
  EXPECT_GT(minmax[0] - minmax[1], 0.02);  // upstream stretches 0.5 ms over the range
  EXPECT_FALSE(
      LatencyScorer::create("l", {{"normalization", "zscore"}}, services_.handle()).plugin);
}

TEST_F(LatencyScorerTest, SloMissCompositeRanksByLoadAndPrefixWhenNoPodMeetsTheSlo) {
  auto s = make({{"sloMissStrategy", "composite"}});
  // "near" is closest to the SLO but has no cache hit and a queue; "cached" misses by more
  // but holds the whole prompt.
  Endpoint near = predicted("near", -5, -1, 3),
           cached = with_prefix(predicted("cached", -40, -1, 3), 4, 4);
  near = testing::with_info(near, [](PodInfo& i) { i.metrics.waiting = 4; });
  const std::vector<Endpoint> eps = {near, cached};
  req_.slo_ttft_ms = 100;
  auto got = score(*s, eps);
  expect_scores(got, score(*make({{"headroomSelectionStrategy", "composite-only"}}), eps));
  EXPECT_LT(got[0], got[1]);
  // Upstream ("least") and requests without SLO headers rank by the predictions.
  EXPECT_GT(score(*make(), eps)[0], score(*make(), eps)[1]);
  req_.slo_ttft_ms.reset();
  got = score(*s, eps);
  EXPECT_GT(got[0], got[1]);
  // A pod that meets the SLO is still scored by its headroom.
  req_.slo_ttft_ms = 100;
  got = score(*s, {near, cached, predicted("fits", 10, 1, 3)});
  EXPECT_EQ(got[0], 0.0);
  EXPECT_EQ(got[1], 0.0);
  EXPECT_GT(got[2], 0.0);
  EXPECT_FALSE(
      LatencyScorer::create("l", {{"sloMissStrategy", "most"}}, services_.handle()).plugin);
}

TEST_F(LatencyScorerTest, SloMissLatencyCompositeWeighsTheCompositeByThePredictions) {
  auto s = make({{"sloMissStrategy", "latency-composite"},
                 {"headroomSelectionStrategy", "latency-composite"}});
  // Both miss a 100-ms SLO and look alike to the composite; "slow" is predicted twice as long
  // (a slower GPU class), so it gets half the score, where the composite alone ties them.
  Endpoint fast = predicted("fast", -20, -1, 3), slow = predicted("slow", -140, -1, 3);
  fast.latency->predicted_ttft_ms = 120;
  slow.latency->predicted_ttft_ms = 240;
  req_.slo_ttft_ms = 100;
  auto got = score(*s, {fast, slow});
  auto composite = score(*make({{"sloMissStrategy", "composite"}}), {fast, slow});
  EXPECT_DOUBLE_EQ(composite[0], composite[1]);
  EXPECT_GT(got[0], 0.0);
  EXPECT_NEAR(got[1] / got[0], (0.8 * 0.5 + 0.2 * 1.0) / 1.0, 1e-9);
  // A cache hit still counts: the slow pod holding the whole prompt beats the fast one without.
  got = score(*s, {fast, with_prefix(slow, 4, 4)});
  EXPECT_GT(got[1], got[0]);
  // The same as the positive bucket's scores once the pods meet the SLO.
  req_.slo_ttft_ms = 1000;
  fast.latency->ttft_headroom_ms = 880, slow.latency->ttft_headroom_ms = 760;
  fast.latency->tpot_headroom_ms = slow.latency->tpot_headroom_ms = 1;
  auto met = score(*s, {fast, slow});
  EXPECT_NEAR(met[1] / met[0], (0.8 * 0.5 + 0.2 * 1.0) / 1.0, 1e-9);
}

TEST_F(LatencyScorerTest, SloMissConcentrateSendsMissesToTheBusiestPod) {
  auto s = make({{"sloMissStrategy", "concentrate"}});
  Endpoint busy = predicted("busy", -500, -1, 9), light = predicted("light", -20, -1, 1);
  busy = testing::with_info(busy, [](PodInfo& i) {
    i.metrics.kv_cache_usage = 0.9;
    i.metrics.waiting = 12;
  });
  req_.slo_ttft_ms = 100;
  auto got = score(*s, {busy, light});
  EXPECT_GT(got[0], got[1]);
  expect_scores(got, {1.0 - score(*make({{"sloMissStrategy", "composite"}}), {busy, light})[0],
                      1.0 - score(*make({{"sloMissStrategy", "composite"}}), {busy, light})[1]});
  // Only misses: a pod that meets the SLO wins, and traffic without SLOs follows predictions.
  got = score(*s, {busy, light, predicted("fits", 10, 1, 3)});
  EXPECT_EQ(got[0], 0.0);
  EXPECT_GT(got[2], 0.0);
  req_.slo_ttft_ms.reset();
  got = score(*s, {busy, light});
  EXPECT_LT(got[0], got[1]);
}

TEST_F(LatencyScorerTest, ColdStartConstantPredictionsFollowLoadAndPrefix) {
  auto s = make();
  Endpoint full = predicted("full", -10, -10, 3);
  full = testing::with_info(full, [](PodInfo& i) {
    i.metrics.kv_cache_usage = 0.9;
    i.metrics.waiting = 4;
  });
  Endpoint cached = with_prefix(predicted("cached", -10, -10, 3), 4, 4);
  auto got = score(*s, {full, cached});
  EXPECT_LT(got[0], got[1]);
}

TEST_F(LatencyScorerTest, IndistinctPredictionsCanRankByPrefillWork) {
  // 1,000-token prompt; constant predictions. Work = uncached tokens in flight + own uncached.
  req_.input_tokens = 1000;
  auto s = make({{"indistinctPredictions", "prefill-work"}, {"preferIdlePods", false}});
  Endpoint idle = predicted("idle", -10, 0, 0);  // 0 + 1000
  Endpoint busy = predicted("busy", -10, 0, 1);  // 3000 + 1000
  busy.prefill_tokens_in_flight = 3000;
  Endpoint cached = with_prefix(predicted("cached", -10, 0, 2), 3, 4);  // 400 + 250
  cached.prefill_tokens_in_flight = 400;
  expect_scores(score(*s, {idle, busy, cached}), {651.0 / 1001.0, 651.0 / 4001.0, 1.0});
  // The composite (default) ranks the same pods by scraped load and prefix instead.
  auto composite = make({{"preferIdlePods", false}});
  auto got = score(*composite, {idle, busy, cached});
  EXPECT_GT(got[0], got[1]);
  // Distinct predictions are ranked by the predictions, whatever the work.
  busy.latency->predicted_ttft_ms = 5, busy.latency->ttft_headroom_ms = -5;
  got = score(*s, {idle, busy, cached});
  EXPECT_EQ(got[1], 1.0);
  EXPECT_FALSE(
      LatencyScorer::create("l", {{"indistinctPredictions", "work"}}, services_.handle()).plugin);
}

TEST_F(LatencyScorerTest, WithoutIdlePreferenceABusyPodWithBetterPredictionWins) {
  auto s = make({{"preferIdlePods", false}});
  auto got = score(*s, {predicted("busy", -20, -10, 5), predicted("idle", -50, -10, 0)});
  EXPECT_GT(got[0], got[1]);
  auto upstream = make();
  got = score(*upstream, {predicted("busy", -20, -10, 5), predicted("idle", -50, -10, 0)});
  EXPECT_EQ(got[0], 0.0);  // upstream: the idle bucket wins whatever the predictions
}

TEST_F(LatencyScorerTest, VectorThreePositiveLeast) {
  auto s = make();
  expect_scores(
      score(*s, {predicted("a", 10, 1, 1), predicted("b", 20, 2, 1), predicted("c", 40, 4, 1)}),
      {1.0, 0.67, 0.01});
}

TEST_F(LatencyScorerTest, VectorZeroTpotRange) {
  auto s = make();
  expect_scores(score(*s, {predicted("a", 10, 5, 1), predicted("b", 40, 5, 1)}), {1.0, 0.01});
}

TEST_F(LatencyScorerTest, VectorNoSloBusy) {
  auto s = make();
  expect_scores(score(*s, {predicted("a", -200, 0, 2), predicted("b", -400, 0, 2),
                           predicted("c", -300, 0, 2)}),
                {1.0, 0.01, 0.51});
}

TEST_F(LatencyScorerTest, VectorCompositeTwoPods) {
  auto s = make();
  expect_scores(score(*s, {pod("a", 0.2, 0), pod("b", 0.8, 5)}), {0.60, 0.07});
}

TEST_F(LatencyScorerTest, VectorCompositeThreePods) {
  auto s = make();
  expect_scores(score(*s, {with_prefix(pod("a", 0.5, 2), 1, 2), pod("b", 0.1, 4),
                           with_prefix(pod("c", 0.9, 0), 4, 4)}),
                {0.50, 0.30, 0.70});
}

TEST_F(LatencyScorerTest, NegativeBucketsInOrderTpotOnlyThenTtftOnlyThenBoth) {
  auto s = make();
  // All busy and negative: only-TPOT-negative wins over only-TTFT-negative and both-negative.
  expect_scores(score(*s, {predicted("both", -50, -10, 3), predicted("ttft", -30, 5, 3),
                           predicted("tpot", 10, -8, 3)}),
                {0.0, 0.0, 0.51});
  expect_scores(score(*s, {predicted("both", -50, -10, 3), predicted("ttft", -30, 5, 3)}),
                {0.0, 0.51});
}

TEST_F(LatencyScorerTest, PositiveBucketBeatsNegativeAndIdle) {
  auto s = make();
  expect_scores(score(*s, {predicted("neg-idle", -5, -1, 0), predicted("pos-busy", 5, 1, 4)}),
                {0.0, 0.51});
}

TEST_F(LatencyScorerTest, MostIsNotAppliedToNegativeBuckets) {
  auto s = make({{"headroomSelectionStrategy", "most"}});
  // "most" over deficits would prefer the most overloaded pod; negative buckets use "least".
  expect_scores(score(*s, {predicted("a", -10, -5, 0), predicted("b", -100, -30, 0)}), {1.0, 0.01});
}

TEST_F(LatencyScorerTest, PodWithoutPredictionIsNeverPositiveWithZeroHeadroom) {
  auto s = make();
  expect_scores(score(*s, {pod("unknown"), predicted("a", 10, 1, 1), predicted("b", 40, 4, 1)}),
                {0.0, 1.0, 0.01});
}

TEST_F(LatencyScorerTest, CompositeOnlyIgnoresPredictions) {
  auto s = make({{"headroomSelectionStrategy", "composite-only"}});
  Endpoint a = predicted("a", 100, 20, 0), b = predicted("b", 30, 5, 0);
  a = testing::with_info(a, [](PodInfo& i) { i.metrics.kv_cache_usage = 0.2; });
  b = testing::with_info(b, [](PodInfo& i) {
    i.metrics.kv_cache_usage = 0.8;
    i.metrics.waiting = 5;
  });
  expect_scores(score(*s, {a, b}), {0.60, 0.07});
}

TEST_F(LatencyScorerTest, CompositeMostAndLeastScoreThePositiveBucket) {
  Endpoint a = predicted("a", 100, 20, 0), b = predicted("b", 30, 5, 0),
           c = predicted("c", -5, 1, 0);
  a = testing::with_info(a, [](PodInfo& i) { i.metrics.kv_cache_usage = 0.2; });
  b = testing::with_info(b, [](PodInfo& i) {
    i.metrics.kv_cache_usage = 0.8;
    i.metrics.waiting = 5;
  });
  expect_scores(score(*make({{"headroomSelectionStrategy", "composite-most"}}), {a, b, c}),
                {0.60, 0.07, 0.0});
  expect_scores(score(*make({{"headroomSelectionStrategy", "composite-least"}}), {a, b, c}),
                {0.40, 0.93, 0.0});
}

// latency-composite: the predictions separate pods they tell apart (a pod predicted twice as
// slow keeps half its composite score); within the model's error the cache hit wins.
TEST_F(LatencyScorerTest, LatencyCompositeScalesTheCompositeByTheLatencyRatio) {
  auto s = make({{"headroomSelectionStrategy", "latency-composite"}, {"tpotWeight", 0}});
  auto with_prediction = [](Endpoint e, double ttft_ms) {
    e.latency->predicted_ttft_ms = ttft_ms;
    e.latency->predicted_tpot_ms = 10;
    return e;
  };
  req_.slo_ttft_ms = 200;
  const Endpoint fast = with_prediction(predicted("fast", 150, 5, 0), 50);
  const Endpoint cached = with_prefix(with_prediction(predicted("cached", 145, 5, 0), 55), 4, 4);
  const Endpoint slow = with_prefix(with_prediction(predicted("slow", 100, 5, 0), 100), 4, 4);
  const Endpoint missing = with_prediction(predicted("missing", -10, 5, 0), 210);
  auto got = score(*s, {fast, cached, slow, missing});
  // Composite (equal weights; KV half used, no queue): 0.50 without the prefix, 0.83 with it.
  EXPECT_NEAR(got[0], 0.50 * 1.0, 1e-9);
  EXPECT_NEAR(got[1], 0.83 * 50.0 / 55.0, 1e-9);
  EXPECT_NEAR(got[2], 0.83 * 50.0 / 100.0, 1e-9);
  EXPECT_EQ(got[3], 0.0) << "outside the positive bucket";
  EXPECT_GT(got[1], got[0]) << "the cache hit wins within 10 %";
  EXPECT_LT(got[2], got[0]) << "twice as slow loses even with the cache";
  EXPECT_TRUE(LatencyScorer::create("l", {{"headroomSelectionStrategy", "Latency-Composite"}},
                                    services_.handle())
                  .plugin);
}

// latency-composite prices a cache hit against the pod's queue: the prompt tokens the hit saves
// over those plus the prefill tokens already waiting there (the EPP's own bookkeeping). A hot
// pod whose prefill queue outweighs the hit loses the hit's advantage, so one shared prefix
// does not pile its traffic onto the pods holding it.
TEST_F(LatencyScorerTest, LatencyCompositeWeighsAHitByThePrefillQueuedAhead) {
  auto s = make({{"headroomSelectionStrategy", "latency-composite"}, {"tpotWeight", 0}});
  req_.input_tokens = 1000;
  auto cached = [](std::string name, int64_t prefill_ahead) {
    Endpoint e = with_prefix(predicted(std::move(name), 150, 5, 0), 4, 4);
    e.latency->predicted_ttft_ms = 50;
    e.latency->predicted_tpot_ms = 10;
    e.prefill_tokens_in_flight = prefill_ahead;
    return e;
  };
  auto got = score(*s, {cached("idle", 0), cached("busy", 1000), cached("jammed", 99000)});
  // Composite (equal weights; KV half used, no queue): 0.50 + a third of the prefix term.
  EXPECT_NEAR(got[0], 0.83, 1e-9) << "nothing ahead: the whole hit";
  EXPECT_NEAR(got[1], 0.67, 1e-9) << "as much prefill ahead as the hit saves: half of it";
  EXPECT_NEAR(got[2], 0.50, 1e-9) << "a queue 99x the hit: as if uncached";
  // The upstream composite strategies keep upstream's plain prefix score.
  auto plain = score(*make({{"headroomSelectionStrategy", "composite-only"}}),
                     {cached("idle", 0), cached("jammed", 99000)});
  EXPECT_EQ(plain[0], plain[1]);
}

// latency-cost: a pod costs the request's predicted TTFT plus the delay its own prefill adds to
// the requests arriving behind it: about the candidates' mean waiting queue of them, each
// delayed by its uncached tokens at the pool's prefill rate (the least predicted time per token
// ahead of a first token). With no queue that is the prediction alone; with one, a cache hit
// is worth the prefill it spares.
TEST_F(LatencyScorerTest, LatencyCostChargesOwnPrefillToTheRequestsQueuedBehind) {
  auto s = make({{"headroomSelectionStrategy", "latency-cost"}, {"tpotWeight", 0}});
  EXPECT_EQ(s->config().sloMissStrategy, "latency-cost");
  EXPECT_FALSE(s->config().preferIdlePods);
  EXPECT_EQ(s->config().indistinctPredictions, "composite");
  req_.input_tokens = 1000;
  auto candidate = [](std::string name, double ttft_ms, int64_t waiting, std::size_t cached_of_4,
                      int64_t prefill_ahead) {
    Endpoint e = with_prefix(predicted(std::move(name), -ttft_ms, 0, 0), cached_of_4, 4);
    e = with_info(e, [&](PodInfo& info) { info.metrics.waiting = waiting; });
    e.latency->predicted_tpot_ms = 10;
    e.prefill_tokens_in_flight = prefill_ahead;
    return e;
  };
  // No request waits anywhere: the predictions alone, whatever is cached.
  auto idle = score(*s, {candidate("fast", 50, 0, 0, 0), candidate("cached", 60, 0, 3, 0)});
  EXPECT_NEAR(idle[0], 1.0, 1e-9);
  EXPECT_NEAR(idle[1], 50.0 / 60.0, 1e-9);
  // Two requests wait on each pod. Rate: min(50 ms / 1000 tokens, 60 ms / (250 + 250)) = 0.05
  // ms per token. The uncached pod costs 50 + 2 x 1000 x 0.05 = 150, the cached one (250
  // tokens of its own) 60 + 2 x 250 x 0.05 = 85.
  auto busy = score(*s, {candidate("fast", 50, 2, 0, 0), candidate("cached", 60, 2, 3, 250)});
  EXPECT_NEAR(busy[0], 85.0 / 150.0, 1e-9);
  EXPECT_NEAR(busy[1], 1.0, 1e-9);
  // Predictions that tell no pod apart know nothing of the load: the composite decides.
  const std::vector<Endpoint> tied = {candidate("fast", 10, 2, 0, 0),
                                      candidate("cached", 10, 2, 3, 250)};
  expect_scores(score(*s, tied),
                score(*make({{"headroomSelectionStrategy", "composite-only"}}), tied));
  // With an SLO that both meet, the positive bucket is ranked the same way.
  req_.slo_ttft_ms = 500;
  auto meets = [](Endpoint e) {
    e.latency->ttft_headroom_ms = 500 - e.latency->predicted_ttft_ms;
    e.latency->ttft_valid = true;
    return e;
  };
  auto with_slo =
      score(*s, {meets(candidate("fast", 50, 2, 0, 0)), meets(candidate("cached", 60, 2, 3, 250))});
  EXPECT_NEAR(with_slo[0], 85.0 / 150.0, 1e-9);
  EXPECT_NEAR(with_slo[1], 1.0, 1e-9);
  EXPECT_FALSE(
      LatencyScorer::create("l", {{"sloMissStrategy", "latency-costs"}}, services_.handle())
          .plugin);
}

TEST_F(LatencyScorerTest, StrategyPrecedenceParamThenEnvThenLeast) {
  EXPECT_EQ(make()->strategy(), LatencyScorer::Strategy::kLeast);
  services_.env["HEADROOM_SELECTION_STRATEGY"] = "MOST";
  EXPECT_EQ(make()->strategy(), LatencyScorer::Strategy::kMost);
  EXPECT_EQ(make({{"headroomSelectionStrategy", "composite-least"}})->strategy(),
            LatencyScorer::Strategy::kCompositeLeast);
  services_.env["HEADROOM_SELECTION_STRATEGY"] = "sideways";
  auto bad = LatencyScorer::create("x", nullptr, services_.handle());
  EXPECT_FALSE(bad.plugin);
  EXPECT_NE(bad.error.find("HEADROOM_SELECTION_STRATEGY"), std::string::npos);
}

TEST_F(LatencyScorerTest, PartialParametersKeepOtherDefaults) {
  auto s = make({{"tpotWeight", 0.5}});
  EXPECT_DOUBLE_EQ(s->config().tpotWeight, 0.5);
  EXPECT_DOUBLE_EQ(s->config().ttftWeight, 0.8);
  EXPECT_EQ(s->config().headroomSelectionStrategy, "least");
  EXPECT_DOUBLE_EQ(s->config().compositeQueueWeight, 1.0);
  EXPECT_EQ(s->config().sloMissStrategy, "least");  // upstream's behaviour under "least"
  EXPECT_TRUE(s->config().preferIdlePods);
  EXPECT_EQ(s->config().indistinctPredictions, "composite");
}

TEST_F(LatencyScorerTest, LatencyCompositeBringsItsPolicyUnlessSetExplicitly) {
  auto s = make({{"headroomSelectionStrategy", "latency-composite"}});
  EXPECT_EQ(s->config().sloMissStrategy, "latency-composite");
  EXPECT_FALSE(s->config().preferIdlePods);
  EXPECT_EQ(s->config().indistinctPredictions, "prefill-work");
  auto t = make({{"headroomSelectionStrategy", "latency-composite"},
                 {"sloMissStrategy", "least"},
                 {"preferIdlePods", true},
                 {"indistinctPredictions", "composite"}});
  EXPECT_EQ(t->config().sloMissStrategy, "least");
  EXPECT_TRUE(t->config().preferIdlePods);
  EXPECT_EQ(t->config().indistinctPredictions, "composite");
}

TEST_F(LatencyScorerTest, InvalidParametersAreErrorsNamingTheParameter) {
  auto h = services_.handle();
  auto r = LatencyScorer::create("x", {{"ttftWeight", -1}}, h);
  EXPECT_NE(r.error.find("ttftWeight"), std::string::npos);
  r = LatencyScorer::create("x", {{"headroomSelectionStrategy", "best"}}, h);
  EXPECT_NE(r.error.find("headroomSelectionStrategy"), std::string::npos);
  r = LatencyScorer::create("x", {{"ttftWeigth", 1}}, h);
  EXPECT_NE(r.error.find("unknown parameter 'ttftWeigth'"), std::string::npos);
  r = LatencyScorer::create("x", {{"ttftWeight", "high"}}, h);
  EXPECT_NE(r.error.find("must be a number"), std::string::npos);
}

}  // namespace
}  // namespace llmd::epp
