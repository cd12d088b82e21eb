// Upstream's parameter names (GIE v1.5.0, llm-d-router) on our plugins, each with upstream's
// meaning or refused naming it: the affinity filter's affinityThreshold, ttftSource and
// peakPrefillThroughput, the latency scorer's compositeKVWeight, the pickers'
// maxNumOfEndpoints, and the predicted-latency producer's predictInProduce /
// predictInPrepareData, sloBufferFactor, endpointRoleLabel, samplingMean,
// maxDecodeTokenSamplesForPrediction and contextTTL.
#include <gtest/gtest.h>

#include "epp/plugins/filter/prefix_cache_affinity/prefix_cache_affinity_filter.h"
#include "epp/plugins/picker/max_score/max_score_picker.h"
#include "epp/plugins/picker/weighted_random/weighted_random_picker.h"
#include "epp/plugins/producer/predicted_latency/predicted_latency_producer.h"
#include "epp/plugins/scorer/latency/latency_scorer.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
using testing::FixedRng;
using testing::pod;
using testing::with_prefix;

class UpstreamParameters : public ::testing::Test {
 protected:
  template <class T>
  std::shared_ptr<const T> make(const nlohmann::json& params) {
    auto made = T::create("x", params, services_.handle());
    EXPECT_TRUE(made.plugin) << made.error;
    return std::dynamic_pointer_cast<const T>(made.plugin);
  }
  template <class T>
  std::string error(const nlohmann::json& params) {
    return T::create("x", params, services_.handle()).error;
  }
  testing::TestServices services_;
};

TEST_F(UpstreamParameters, AffinityThresholdIsThreshold) {
  using F = PrefixCacheAffinityFilter;
  EXPECT_DOUBLE_EQ(make<F>({{"affinityThreshold", 0.99}})->config().threshold, 0.99);
  EXPECT_NE(error<F>({{"affinityThreshold", 0.9}, {"threshold", 0.9}})
                .find("'threshold' and 'affinityThreshold' are the same setting"),
            std::string::npos);
  EXPECT_NE(error<F>({{"affinityThreshold", 1.5}}).find("must be in [0, 1]"), std::string::npos);
}

// llm-d's ttftSource: prefillThroughput estimates each pod's TTFT from its uncached prompt
// tokens in flight, TTFT_ms = tokens / peakPrefillThroughput x 1000, and needs no predictions.
TEST_F(UpstreamParameters, TtftSourcePrefillThroughputBreaksStickinessOnTokensInFlight) {
  auto f = make<PrefixCacheAffinityFilter>({{"ttftSource", "prefillThroughput"},
                                            {"peakPrefillThroughput", 10000},
                                            {"maxTTFTPenaltyMs", 1000},
                                            {"explorationProbability", 0},
                                            {"queueEscape", false}});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->consumes(), std::vector<AttributeKey>{AttributeKey::kPrefixCacheMatch});
  SchedulingRequest req = testing::request();
  FixedRng rng;
  CycleContext ctx{req, rng};
  Endpoint sticky = with_prefix(pod("sticky"), 10, 10);
  Endpoint other = pod("other");
  sticky.prefill_tokens_in_flight = 15000;  // 1500 ms
  other.prefill_tokens_in_flight = 4000;    // 400 ms: 1100 ms better, over the 1000 allowed
  EXPECT_EQ(f->filter(ctx, {sticky, other}).size(), 2u) << "stickiness broken";
  sticky.prefill_tokens_in_flight = 13000;  // 900 ms better: stays
  EXPECT_EQ(f->filter(ctx, {sticky, other}).size(), 1u);
  // The predictor's TTFT (the default source) would see no prediction here: stickiness stays.
  auto predicted = make<PrefixCacheAffinityFilter>(
      {{"maxTTFTPenaltyMs", 1000}, {"queueEscape", false}, {"explorationProbability", 0}});
  sticky.prefill_tokens_in_flight = 15000;
  EXPECT_EQ(predicted->filter(ctx, {sticky, other}).size(), 1u);
  EXPECT_EQ(predicted->config().ttftSource, "latencyPredictor");
  EXPECT_DOUBLE_EQ(predicted->config().peakPrefillThroughput, 15928);
}

TEST_F(UpstreamParameters, TtftSourceAndPeakPrefillThroughputAreValidated) {
  using F = PrefixCacheAffinityFilter;
  EXPECT_NE(error<F>({{"ttftSource", "guess"}})
                .find("'ttftSource' must be latencyPredictor or "
                      "prefillThroughput"),
            std::string::npos);
  EXPECT_NE(error<F>({{"peakPrefillThroughput", -1}}).find("'peakPrefillThroughput'"),
            std::string::npos);
  EXPECT_NE(error<F>({{"ttftSource", "prefillThroughput"},
                      {"peakPrefillThroughput", 0},
                      {"maxTTFTPenaltyMs", 100}})
                .find("must be > 0 when ttftSource is prefillThroughput"),
            std::string::npos);
  EXPECT_TRUE(make<F>({{"ttftSource", "prefillThroughput"}, {"peakPrefillThroughput", 0}}))
      << "no penalty (0): the throughput is not needed";
}

TEST_F(UpstreamParameters, CompositeKVWeightIsCompositeKvWeight) {
  EXPECT_DOUBLE_EQ(make<LatencyScorer>({{"compositeKVWeight", 3}})->config().compositeKvWeight, 3);
  EXPECT_DOUBLE_EQ(make<LatencyScorer>({{"compositeKvWeight", 2}})->config().compositeKvWeight, 2);
  EXPECT_NE(error<LatencyScorer>({{"compositeKVWeight", 1}, {"compositeKvWeight", 1}})
                .find("the same setting"),
            std::string::npos);
}

TEST_F(UpstreamParameters, MaxNumOfEndpointsIsOneEndpointPerPick) {
  EXPECT_TRUE(make<WeightedRandomPicker>({{"maxNumOfEndpoints", 1}}));
  EXPECT_TRUE(make<MaxScorePicker>({{"maxNumOfEndpoints", 1}}));
  for (int n : {0, 2, 3}) {
    for (const auto& e : {error<WeightedRandomPicker>({{"maxNumOfEndpoints", n}}),
                          error<MaxScorePicker>({{"maxNumOfEndpoints", n}})}) {
      EXPECT_NE(e.find("'maxNumOfEndpoints' must be 1, got " + std::to_string(n)),
                std::string::npos)
          << e;
      EXPECT_NE(e.find("one endpoint per request"), std::string::npos) << e;
    }
  }
}

TEST_F(UpstreamParameters, PredictInProduceFalseIsTrainingOnly) {
  for (const char* key : {"predictInProduce", "predictInPrepareData"}) {
    auto p = make<PredictedLatencyProducer>({{key, false}});
    EXPECT_FALSE(p->config().predictInProduce) << key;
    EXPECT_TRUE(p->ignores_predictions()) << key << ": the pipeline asks for no predictions";
  }
  EXPECT_FALSE(make<PredictedLatencyProducer>(nullptr)->ignores_predictions());
  EXPECT_NE(
      error<PredictedLatencyProducer>({{"predictInProduce", false}, {"predictInPrepareData", true}})
          .find("the same setting"),
      std::string::npos);
}

TEST_F(UpstreamParameters, SloBufferFactorScalesTheTpotSlo) {
  // A pool trained on streams: TPOT is judged (streamingMode: false neutralises it).
  auto p = make<PredictedLatencyProducer>({{"sloBufferFactor", 1.5}, {"streamingMode", true}});
  services_.source.answers = {{80, 40}};
  SchedulingRequest req = testing::request();
  req.streaming = true;
  req.slo_ttft_ms = 100;
  req.slo_tpot_ms = 30;  // checked against 45
  FixedRng rng;
  CycleContext ctx{req, rng};
  std::vector<Endpoint> eps = {pod("a")};
  p->produce(ctx, eps);
  ASSERT_TRUE(eps[0].latency);
  EXPECT_DOUBLE_EQ(eps[0].latency->tpot_headroom_ms, 5);
  EXPECT_TRUE(eps[0].latency->tpot_valid);
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_headroom_ms, 20) << "TTFT is not buffered (upstream)";
  EXPECT_DOUBLE_EQ(make<PredictedLatencyProducer>(nullptr)->config().sloBufferFactor, 1);
  EXPECT_NE(error<PredictedLatencyProducer>({{"sloBufferFactor", 0}}).find("'sloBufferFactor'"),
            std::string::npos);
}

TEST_F(UpstreamParameters, EndpointRoleLabelNamesTheRoleLabel) {
  EXPECT_EQ(make<PredictedLatencyProducer>(nullptr)->endpoint_role_label(), "role");
  EXPECT_EQ(make<PredictedLatencyProducer>({{"endpointRoleLabel", "llm-d.ai/role"}})
                ->endpoint_role_label(),
            "llm-d.ai/role");
  // The label is applied EPP-wide (PodInfo::role_label, set by the pod registry): a pod whose
  // role sits under that label is a prefill pod for the rows and the TPOT neutralisation.
  Endpoint prefill = testing::with_info(pod("p"), [](PodInfo& i) {
    i.labels["llm-d.ai/role"] = "prefill";
    i.role_label = "llm-d.ai/role";
  });
  EXPECT_EQ(prefill.role(), "prefill");
  Endpoint none = testing::with_info(prefill, [](PodInfo& i) { i.role_label = ""; });
  EXPECT_EQ(none.role(), "") << "upstream's default \"\": no roles";
}

TEST_F(UpstreamParameters, MidStreamSamplingAndContextTtlAreAcceptedAndValidated) {
  auto p = make<PredictedLatencyProducer>(
      {{"samplingMean", 500}, {"maxDecodeTokenSamplesForPrediction", 4}, {"contextTTL", "1h30m"}});
  EXPECT_DOUBLE_EQ(p->config().samplingMean, 500);
  EXPECT_EQ(p->config().maxDecodeTokenSamplesForPrediction, 4);
  EXPECT_EQ(p->config().contextTTL, 90min);
  EXPECT_EQ(make<PredictedLatencyProducer>({{"contextTTL", 300000000000LL}})->config().contextTTL,
            5min)
      << "Go's encoding/json reads a time.Duration as integer nanoseconds";
  EXPECT_EQ(make<PredictedLatencyProducer>({{"contextTTL", "250ms"}})->config().contextTTL, 250ms);
  EXPECT_NE(error<PredictedLatencyProducer>({{"samplingMean", 0}}).find("'samplingMean'"),
            std::string::npos);
  EXPECT_NE(error<PredictedLatencyProducer>({{"maxDecodeTokenSamplesForPrediction", -1}})
                .find("'maxDecodeTokenSamplesForPrediction'"),
            std::string::npos);
  EXPECT_NE(error<PredictedLatencyProducer>({{"contextTTL", "5 minutes"}}).find("'contextTTL'"),
            std::string::npos);
  EXPECT_NE(error<PredictedLatencyProducer>({{"contextTTL", "-5m"}}).find("'contextTTL'"),
            std::string::npos);
}

TEST(GoDurations, ParseLikeTimeParseDuration) {
  EXPECT_EQ(parse_go_duration("5m"), std::chrono::nanoseconds(5min));
  EXPECT_EQ(parse_go_duration("1.5h"), std::chrono::nanoseconds(90min));
  EXPECT_EQ(parse_go_duration("2h45m30.5s"), std::chrono::nanoseconds(2h + 45min + 30s + 500ms));
  EXPECT_EQ(parse_go_duration("100us"), std::chrono::nanoseconds(100us));
  EXPECT_EQ(parse_go_duration("0"), std::chrono::nanoseconds(0));
  EXPECT_EQ(parse_go_duration("-1s"), std::chrono::nanoseconds(-1s));
  for (const char* bad : {"", "5", "m", "5 m", "5x", ".s", "1h-2m"}) {
    EXPECT_FALSE(parse_go_duration(bad)) << bad;
  }
}

}  // namespace
}  // namespace llmd::epp
