#include <gtest/gtest.h>

#include "epp/plugins/producer/approx_prefix_cache/approx_prefix_cache_producer.h"
#include "epp/plugins/producer/predicted_latency/predicted_latency_producer.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

using testing::FixedRng;
using testing::pod;

class ApproxPrefixProducerTest : public ::testing::Test {
 protected:
  std::shared_ptr<const ApproxPrefixCacheProducer> make(nlohmann::json params = nullptr) {
    auto made = ApproxPrefixCacheProducer::create("prefix", params, services_.handle());
    EXPECT_TRUE(made.plugin) << made.error;
    return std::dynamic_pointer_cast<const ApproxPrefixCacheProducer>(made.plugin);
  }
  testing::TestServices services_;
  FixedRng rng_;
};

TEST_F(ApproxPrefixProducerTest, ScoresLeadingBlocksAfterAPick) {
  auto p = make();
  // block = 16 tokens x 4 chars = 64 characters; 3 full blocks + 20 chars.
  SchedulingRequest req = testing::request(std::string(64 * 3 + 20, 'x'));
  CycleContext ctx{req, rng_};
  std::vector<Endpoint> eps = {pod("a"), pod("b")};
  p->produce(ctx, eps);
  ASSERT_TRUE(eps[0].prefix && eps[1].prefix);
  EXPECT_EQ(eps[0].prefix->total_blocks, 3u);
  EXPECT_EQ(eps[0].prefix->matched_blocks, 0u);
  p->on_picked(ctx, eps[1]);

  // A follow-up turn that extends the prompt hits the pod that served the first one.
  SchedulingRequest next = testing::request(req.prompt_text + std::string(200, 'y'));
  CycleContext ctx2{next, rng_};
  std::vector<Endpoint> again = {pod("a"), pod("b")};
  p->produce(ctx2, again);
  EXPECT_EQ(again[0].prefix->matched_blocks, 0u);
  EXPECT_EQ(again[1].prefix->matched_blocks, 3u);
  EXPECT_EQ(again[1].prefix->total_blocks, 6u);
  EXPECT_DOUBLE_EQ(again[1].prefix->score(), 0.5);

  // Another model never shares blocks.
  SchedulingRequest other = testing::request(req.prompt_text, "other-model");
  CycleContext ctx3{other, rng_};
  std::vector<Endpoint> third = {pod("b")};
  p->produce(ctx3, third);
  EXPECT_EQ(third[0].prefix->matched_blocks, 0u);
}

TEST_F(ApproxPrefixProducerTest, TheAnswerIsLearnedSoTheNextTurnMatchesInFull) {
  auto p = make();
  const std::string turn1(64 * 4, 'q');
  const std::string answer(64 * 4, 'a');
  const std::string turn2 = turn1 + answer + std::string(64, 'z');  // 9 blocks
  SchedulingRequest req = testing::request(turn1);
  CycleContext ctx{req, rng_};
  p->on_picked(ctx, pod("b"));
  auto match = [&] {
    SchedulingRequest next = testing::request(turn2);
    CycleContext c{next, rng_};
    std::vector<Endpoint> eps = {pod("a"), pod("b")};
    p->produce(c, eps);
    return eps[1].prefix->matched_blocks;
  };
  EXPECT_EQ(match(), 4u);  // only the first prompt
  SchedulingRequest continued = testing::request(turn1 + answer);
  CycleContext done{continued, rng_};
  p->on_response_complete(done, pod("b"));
  EXPECT_EQ(match(), 8u);  // prompt and answer
}

TEST_F(ApproxPrefixProducerTest, ShortPromptHasScoreZero) {
  auto p = make();
  SchedulingRequest req = testing::request("too short");
  CycleContext ctx{req, rng_};
  std::vector<Endpoint> eps = {pod("a")};
  p->produce(ctx, eps);
  ASSERT_TRUE(eps[0].prefix);
  EXPECT_EQ(eps[0].prefix->total_blocks, 0u);
  EXPECT_DOUBLE_EQ(eps[0].prefix->score(), 0.0);
}

TEST_F(ApproxPrefixProducerTest, BlockSizeAndCapacityComeFromPodMetrics) {
  auto p = make();
  SchedulingRequest req = testing::request(std::string(64, 'z'));
  CycleContext ctx{req, rng_};
  Endpoint small = pod("small");
  small = testing::with_info(small, [](PodInfo& i) {
    i.metrics.block_size = 8;  // 32-character blocks: 2 of them
    i.metrics.num_gpu_blocks = 1;
  });
  std::vector<Endpoint> eps = {small, pod("std")};
  p->produce(ctx, eps);
  EXPECT_EQ(eps[0].prefix->total_blocks, 2u);
  EXPECT_EQ(eps[1].prefix->total_blocks, 1u);
  p->on_picked(ctx, eps[0]);
  EXPECT_EQ(services_.index.stats().blocks, 1u);  // capacity num_gpu_blocks = 1

  auto fixed = make({{"autoTune", false}, {"blockSizeTokens", 4}});
  EXPECT_EQ(fixed->config().blockSizeTokens, 4);
  EXPECT_EQ(fixed->config().maxPrefixBlocksToMatch, 256);  // partial params keep defaults
  std::vector<Endpoint> eps2 = {small};
  fixed->produce(ctx, eps2);
  EXPECT_EQ(eps2[0].prefix->total_blocks, 4u);  // 16-character blocks
}

TEST_F(ApproxPrefixProducerTest, DepthZeroFollowsAPromptAsDeepAsThePodCanHoldIt) {
  // 300 blocks of 64 characters: past upstream's 256.
  SchedulingRequest req = testing::request(std::string(64 * 300, 'd'));
  CycleContext ctx{req, rng_};
  Endpoint big =
      testing::with_info(pod("big"), [](PodInfo& i) { i.metrics.num_gpu_blocks = 1000; });
  Endpoint tiny =
      testing::with_info(pod("tiny"), [](PodInfo& i) { i.metrics.num_gpu_blocks = 100; });
  std::vector<Endpoint> upstream = {big};
  make()->produce(ctx, upstream);
  EXPECT_EQ(upstream[0].prefix->total_blocks, 256u);  // the default depth

  auto p = make({{"maxPrefixBlocksToMatch", 0}});
  std::vector<Endpoint> eps = {big, tiny};
  p->produce(ctx, eps);
  EXPECT_EQ(eps[0].prefix->total_blocks, 300u);  // the whole prompt
  EXPECT_EQ(eps[1].prefix->total_blocks, 100u);  // no deeper than the pod's cache
  p->on_picked(ctx, eps[0]);
  std::vector<Endpoint> again = {big};
  p->produce(ctx, again);
  EXPECT_DOUBLE_EQ(again[0].prefix->score(), 1.0);
  EXPECT_EQ(services_.index.stats().blocks, 300u);
}

TEST_F(ApproxPrefixProducerTest, MeasuredCharsPerTokenSetsTheCapacityInTheIndexsBlocks) {
  // A pod of 4 blocks of 16 tokens. Each prompt: 4 blocks of 64 characters.
  Endpoint small = testing::with_info(pod("s"), [](PodInfo& i) { i.metrics.num_gpu_blocks = 4; });
  const std::string first(64 * 4, 'f');
  const std::string second(64 * 4, 's');
  // The pods report 8 characters per token (twice the configured 4): a 16-token block of the
  // pod holds 128 characters, two of the index's blocks, so the pod holds both prompts.
  SchedulingRequest reported = testing::request(first);
  reported.measured_text = SchedulingRequest::MeasuredText{800, 100};
  auto run = [&](const ApproxPrefixCacheProducer& p) {
    SchedulingRequest a = testing::request(first), b = testing::request(second);
    CycleContext ca{a, rng_}, cb{b, rng_}, cr{reported, rng_};
    p.on_response_complete(cr, small);  // the report, and `first` inserted
    p.on_picked(cb, small);
    std::vector<Endpoint> eps = {small};
    p.produce(ca, eps);
    return eps[0].prefix->matched_blocks;
  };
  auto measured = make({{"measuredCapacity", true}});
  EXPECT_EQ(run(*measured), 4u);  // `first` is still there
  EXPECT_DOUBLE_EQ(measured->chars_per_token(), 8.0);
  EXPECT_EQ(measured->capacity(small), 8u);
  EXPECT_EQ(measured->depth(small), 8u);

  services_.index.remove_pod("s");
  auto fixed = make({{"maxPrefixBlocksToMatch", 0}});
  EXPECT_EQ(run(*fixed), 0u);  // capacity 4 index blocks: `second` evicted it
  EXPECT_DOUBLE_EQ(fixed->chars_per_token(), 4.0);
  EXPECT_EQ(fixed->capacity(small), 4u);
}

TEST_F(ApproxPrefixProducerTest, UntilThePodsReportTheConfiguredCharsPerTokenApplies) {
  auto p = make({{"measuredCapacity", true}, {"maxPrefixBlocksToMatch", 256}});
  EXPECT_EQ(p->config().maxPrefixBlocksToMatch, 256);  // an explicit depth still caps
  EXPECT_EQ(make({{"measuredCapacity", true}})->config().maxPrefixBlocksToMatch, 0);
  EXPECT_EQ(make({{"measuredCapacity", true}})->config().charsPerToken, 4);  // other defaults kept
  EXPECT_DOUBLE_EQ(p->chars_per_token(), 4.0);
  Endpoint e = testing::with_info(pod("e"), [](PodInfo& i) { i.metrics.num_gpu_blocks = 10; });
  EXPECT_EQ(p->capacity(e), 10u);
  // A response without usage reports nothing.
  SchedulingRequest unreported = testing::request(std::string(64, 'u'));
  CycleContext ctx{unreported, rng_};
  p->on_response_complete(ctx, e);
  EXPECT_DOUBLE_EQ(p->chars_per_token(), 4.0);
  SchedulingRequest reported = unreported;
  reported.measured_text = SchedulingRequest::MeasuredText{30, 10};
  CycleContext ctx2{reported, rng_};
  p->on_response_complete(ctx2, e);
  EXPECT_DOUBLE_EQ(p->chars_per_token(), 3.0);
  EXPECT_EQ(p->capacity(e), 7u);  // 10 x 3 / 4, whole blocks
}

TEST_F(ApproxPrefixProducerTest, RejectsBadParameters) {
  auto h = services_.handle();
  auto r = ApproxPrefixCacheProducer::create("p", {{"blockSizeTokens", 0}}, h);
  EXPECT_NE(r.error.find("blockSizeTokens"), std::string::npos);
  r = ApproxPrefixCacheProducer::create("p", {{"blockSizeTokens", 1.5}}, h);
  EXPECT_NE(r.error.find("must be an integer"), std::string::npos);
  r = ApproxPrefixCacheProducer::create("p", {{"maxPrefixBlocksToMatch", -1}}, h);
  EXPECT_NE(r.error.find("maxPrefixBlocksToMatch"), std::string::npos);
  r = ApproxPrefixCacheProducer::create("p", {{"measuredCapacity", 1}}, h);
  EXPECT_NE(r.error.find("measuredCapacity"), std::string::npos);
}

class PredictedLatencyProducerTest : public ::testing::Test {
 protected:
  // A pool trained on streams (streamingMode: true, as the default pipeline sets it) unless
  // `params` says otherwise: TPOT is judged for streamed requests.
  std::shared_ptr<const PredictedLatencyProducer> make(nlohmann::json params = nullptr) {
    nlohmann::json p = {{"streamingMode", true}};
    if (params.is_object()) {
      p.update(params);
    }
    auto made = PredictedLatencyProducer::create("pl", p, services_.handle());
    EXPECT_TRUE(made.plugin) << made.error;
    return std::dynamic_pointer_cast<const PredictedLatencyProducer>(made.plugin);
  }
  std::vector<Endpoint> run(const PredictedLatencyProducer& p, const SchedulingRequest& req,
                            std::vector<Endpoint> eps) {
    CycleContext ctx{req, rng_};
    p.produce(ctx, eps);
    return eps;
  }
  // A streamed request with a 150 ms TTFT and a 15 ms TPOT SLO.
  static SchedulingRequest slo_stream() {
    SchedulingRequest req = testing::request();
    req.streaming = true;
    req.slo_ttft_ms = 150;
    req.slo_tpot_ms = 15;
    return req;
  }
  testing::TestServices services_;
  FixedRng rng_;
};

TEST_F(PredictedLatencyProducerTest, BuildsOneFeatureRowPerCandidate) {
  auto p = make();
  SchedulingRequest req = testing::request();
  req.input_tokens = 321;
  Endpoint a = testing::with_prefix(pod("a", 0.25, 3), 3, 4);
  a = testing::with_info(a, [](PodInfo& i) {
    i.metrics.running = 7;
    i.labels["role"] = "decode";
  });
  a.prefill_tokens_in_flight = 900;
  a.decode_tokens_in_flight = 55;
  Endpoint b = pod("b", 0.5, 0);
  run(*p, req, {a, b});
  ASSERT_EQ(services_.source.last_rows.size(), 2u);
  const auto& r = services_.source.last_rows[0];
  EXPECT_DOUBLE_EQ(r.kv_cache_percentage, 0.25);
  EXPECT_EQ(r.input_token_length, 321);
  EXPECT_EQ(r.num_request_waiting, 3);
  EXPECT_EQ(r.num_request_running, 7);
  EXPECT_EQ(r.num_tokens_generated, 1);
  EXPECT_DOUBLE_EQ(r.prefix_cache_score, 0.75);
  EXPECT_EQ(r.pod_type, features::PodType::kDecode);
  EXPECT_EQ(r.prefill_tokens_in_flight, 900);
  EXPECT_EQ(r.decode_tokens_in_flight, 55);
  EXPECT_DOUBLE_EQ(services_.source.last_rows[1].prefix_cache_score, 0.0);  // no prefix info
  EXPECT_EQ(services_.source.last_rows[1].pod_type, features::PodType::kNone);
  EXPECT_EQ(services_.source.last_deadline, testing::kNow + std::chrono::milliseconds(50));
}

TEST_F(PredictedLatencyProducerTest, HeadroomAndValidityWithSlos) {
  auto p = make();
  services_.source.answers = {{80, 20}, {150, 40}};
  SchedulingRequest req = testing::request();
  req.streaming = true;
  req.slo_ttft_ms = 100;
  req.slo_tpot_ms = 30;
  auto eps = run(*p, req, {pod("a"), pod("b")});
  ASSERT_TRUE(eps[0].latency && eps[1].latency);
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_headroom_ms, 20);
  EXPECT_DOUBLE_EQ(eps[0].latency->tpot_headroom_ms, 10);
  EXPECT_TRUE(eps[0].latency->both_valid());
  EXPECT_DOUBLE_EQ(eps[1].latency->ttft_headroom_ms, -50);
  EXPECT_DOUBLE_EQ(eps[1].latency->tpot_headroom_ms, -10);
  EXPECT_FALSE(eps[1].latency->ttft_valid);
  EXPECT_FALSE(eps[1].latency->tpot_valid);
  EXPECT_DOUBLE_EQ(eps[1].latency->predicted_ttft_ms, 150);
}

TEST_F(PredictedLatencyProducerTest, WithoutSloTtftHeadroomIsMinusPredicted) {
  auto p = make();
  services_.source.answers = {{80, 20}};
  SchedulingRequest req = testing::request();
  req.streaming = true;
  auto eps = run(*p, req, {pod("a")});
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_headroom_ms, -80);
  EXPECT_DOUBLE_EQ(eps[0].latency->tpot_headroom_ms, 0);
  EXPECT_TRUE(eps[0].latency->both_valid());
}

TEST_F(PredictedLatencyProducerTest, TpotNeutralisedForNonStreamingAndPrefillPods) {
  services_.source.answers = {{80, 50}, {80, 50}};
  SchedulingRequest req = testing::request();
  req.slo_ttft_ms = 100;
  req.slo_tpot_ms = 30;
  req.streaming = false;
  auto eps = run(*make(), req, {pod("a")});
  EXPECT_DOUBLE_EQ(eps[0].latency->tpot_headroom_ms, 0);
  EXPECT_TRUE(eps[0].latency->tpot_valid);

  req.streaming = true;
  Endpoint prefill = pod("p");
  prefill = testing::with_info(prefill, [](PodInfo& i) { i.labels["role"] = "prefill"; });
  eps = run(*make(), req, {prefill, pod("d")});
  EXPECT_DOUBLE_EQ(eps[0].latency->tpot_headroom_ms, 0);
  EXPECT_TRUE(eps[0].latency->tpot_valid);
  EXPECT_DOUBLE_EQ(eps[1].latency->tpot_headroom_ms, -20);

  eps = run(*make({{"streamingMode", false}}), req, {pod("d")});
  EXPECT_DOUBLE_EQ(eps[0].latency->tpot_headroom_ms, 0);
}

TEST_F(PredictedLatencyProducerTest, PodResidualFactorsScalePredictionsAndHeadroomWhenEnabled) {
  services_.source.answers = {{100, 10}, {90, 12}};
  const SchedulingRequest req = slo_stream();
  Endpoint slow = pod("slow");
  slow.ttft_residual_factor = 2.0;
  slow.tpot_residual_factor = 1.5;
  auto eps = run(*make({{"podResidualCorrection", true}}), req, {slow, pod("fast")});
  ASSERT_TRUE(eps[0].latency && eps[1].latency);
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_ttft_ms, 200);
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_tpot_ms, 15);
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_headroom_ms, -50);
  EXPECT_FALSE(eps[0].latency->ttft_valid);
  EXPECT_FALSE(eps[0].latency->tpot_valid);
  // What the pod's measurements are compared with stays the model's own value.
  EXPECT_DOUBLE_EQ(eps[0].latency->model_ttft_ms, 100);
  EXPECT_DOUBLE_EQ(eps[0].latency->model_tpot_ms, 10);
  EXPECT_DOUBLE_EQ(eps[1].latency->predicted_ttft_ms, 90);

  // Off (as upstream): the model's values as they are.
  eps = run(*make({{"podResidualCorrection", false}}), req, {slow, pod("fast")});
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_ttft_ms, 100);
  EXPECT_TRUE(eps[0].latency->ttft_valid);

  // The same prediction for every pod (the untrained model's constant) is no model of what
  // the pod then does: still scaled, but not compared with the pod's measurement.
  services_.source.answers = {{100, 10}, {100, 10}};
  eps = run(*make({{"podResidualCorrection", true}}), req, {slow, pod("fast")});
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_ttft_ms, 200);
  EXPECT_DOUBLE_EQ(eps[0].latency->model_ttft_ms, 0);
  EXPECT_DOUBLE_EQ(eps[0].latency->model_tpot_ms, 0);
  EXPECT_FALSE(
      PredictedLatencyProducer::create("pl", {{"podResidualCorrection", "yes"}}, services_.handle())
          .plugin);
}

TEST_F(PredictedLatencyProducerTest, AnOverdueWaitingRequestDelaysThePodsPredictionsWhenEnabled) {
  services_.source.answers = {{100, 10}, {90, 12}};
  const SchedulingRequest req = slo_stream();
  Endpoint late = pod("late");
  late.ttft_late_ms = 70;  // its most overdue request is 70 ms past its bound
  late.ttft_residual_factor = 2.0;
  auto eps = run(*make({{"lateFirstTokenCorrection", true}, {"podResidualCorrection", true}}), req,
                 {late, pod("on-time")});
  ASSERT_TRUE(eps[0].latency && eps[1].latency);
  // Added after the per-pod factor: the queue is late in time, not in proportion.
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_ttft_ms, 270);
  EXPECT_DOUBLE_EQ(eps[0].latency->unphased_ttft_ms, 270);
  EXPECT_DOUBLE_EQ(eps[0].latency->expected_ttft_ms, 270);  // no central estimate: the bound
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_late_ms, 70);
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_headroom_ms, -120);
  EXPECT_DOUBLE_EQ(eps[0].latency->model_ttft_ms, 100) << "the model's own value stays apart";
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_tpot_ms, 10) << "TPOT untouched";
  EXPECT_DOUBLE_EQ(eps[1].latency->predicted_ttft_ms, 90);
  // Off (the default): lateness is ignored.
  eps = run(*make({{"podResidualCorrection", true}}), req, {late, pod("on-time")});
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_ttft_ms, 200);
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_late_ms, 0);
}

TEST_F(PredictedLatencyProducerTest, SloChecksScaleBoundsByThePoolsLiveCoverageWhenEnabled) {
  // Pod "a" is predicted 120 ms / 12 ms, inside a 150 / 15 ms SLO; the pool's bounds held only
  // after scaling by 1.5 (TTFT) and 1.25 (TPOT) lately, so the check sees 180 / 15 ms: a miss.
  services_.source.answers = {{120, 12}, {80, 10}};
  const SchedulingRequest req = slo_stream();
  auto calibrated = [](const std::string& name) {
    Endpoint e = pod(name);
    e.ttft_bound_factor = 1.5;
    e.tpot_bound_factor = 1.25;
    return e;
  };
  auto eps = run(*make({{"sloBoundCalibration", true}}), req, {calibrated("a"), calibrated("b")});
  ASSERT_TRUE(eps[0].latency && eps[1].latency);
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_headroom_ms, -30);
  EXPECT_FALSE(eps[0].latency->ttft_valid);
  EXPECT_DOUBLE_EQ(eps[0].latency->tpot_headroom_ms, 0);
  EXPECT_FALSE(eps[0].latency->tpot_valid);
  EXPECT_DOUBLE_EQ(eps[1].latency->ttft_headroom_ms, 30);
  EXPECT_TRUE(eps[1].latency->ttft_valid);
  EXPECT_DOUBLE_EQ(eps[1].latency->tpot_headroom_ms, 2.5);
  EXPECT_TRUE(eps[1].latency->tpot_valid);
  // Ranking values stay the model's (a pool-wide factor would not reorder pods anyway).
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_ttft_ms, 120);
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_tpot_ms, 12);

  // Off (as upstream): the bounds as they are.
  eps = run(*make({{"sloBoundCalibration", false}}), req, {calibrated("a"), calibrated("b")});
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_headroom_ms, 30);
  EXPECT_TRUE(eps[0].latency->ttft_valid && eps[0].latency->tpot_valid);

  // Requests without SLO headers: the headroom is -prediction, uncalibrated.
  SchedulingRequest plain = testing::request();
  eps = run(*make({{"sloBoundCalibration", true}}), plain, {calibrated("a"), calibrated("b")});
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_headroom_ms, -120);
  EXPECT_FALSE(
      PredictedLatencyProducer::create("pl", {{"sloBoundCalibration", 1.5}}, services_.handle())
          .plugin);
}

TEST_F(PredictedLatencyProducerTest, StepPhaseShiftsTtftOfBusyPodsWhoseStepEndsSoonOrLate) {
  // Model: 20 ms TTFT on every pod, central estimate 16. Steps of 8 ms on the busy pods; the
  // model's average includes half a step (4 ms) of waiting for the step in progress.
  services_.source.answers = {{20, 10, 16, 9}, {20, 10, 16, 9}, {20, 10, 16, 9}, {21, 10, 17, 9}};
  SchedulingRequest req = testing::request();
  req.streaming = true;
  auto busy = [](const std::string& name, double since_step_ms) {
    Endpoint e = pod(name);
    e.dispatched = 3;
    e.step = StepTiming{
        8.0, testing::kNow - std::chrono::microseconds(static_cast<int64_t>(since_step_ms * 1000))};
    return e;
  };
  const std::vector<Endpoint> pods = {busy("just-started", 0.0), busy("ends-now", 7.9),
                                      busy("late", 8.5), pod("idle")};
  auto eps = run(*make({{"stepPhaseCorrection", true}}), req, pods);
  ASSERT_TRUE(eps[0].latency && eps[3].latency);
  // A whole step ahead: +4 ms; about to end: ~-4 ms; 0.5 ms past its usual length (within 10 %
  // of it, as late as steps jitter): -4 ms.
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_phase_ms, 4.0);
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_ttft_ms, 24.0);
  EXPECT_DOUBLE_EQ(eps[0].latency->expected_ttft_ms, 20.0);
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_headroom_ms, -24.0);
  EXPECT_NEAR(eps[1].latency->ttft_phase_ms, -3.9, 1e-9);
  EXPECT_NEAR(eps[1].latency->predicted_ttft_ms, 16.1, 1e-9);
  EXPECT_NEAR(eps[1].latency->expected_ttft_ms, 12.1, 1e-9);
  EXPECT_DOUBLE_EQ(eps[2].latency->ttft_phase_ms, -4.0);
  // Nothing of ours running there: no phase (an idle pod starts at once, as the model knows).
  EXPECT_DOUBLE_EQ(eps[3].latency->ttft_phase_ms, 0.0);
  EXPECT_DOUBLE_EQ(eps[3].latency->predicted_ttft_ms, 21.0);
  // The model's own value (what the pod's residual is measured against) is untouched, and the
  // values before the phase are kept apart, not recovered by subtracting it again.
  EXPECT_DOUBLE_EQ(eps[0].latency->model_ttft_ms, 20.0);
  for (int i : {0, 1, 2}) {
    EXPECT_DOUBLE_EQ(eps[i].latency->unphased_ttft_ms, 20.0) << i;
    EXPECT_DOUBLE_EQ(eps[i].latency->unphased_expected_ttft_ms, 16.0) << i;
  }

  // Off, as upstream.
  eps = run(*make({{"stepPhaseCorrection", false}}), req, pods);
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_phase_ms, 0.0);
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_ttft_ms, 20.0);

  // SLO traffic is checked against the phase-averaged bound.
  req.slo_ttft_ms = 22;
  eps = run(*make({{"stepPhaseCorrection", true}}), req, pods);
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_phase_ms, 0.0);
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_ttft_ms, 20.0);
  EXPECT_TRUE(eps[0].latency->ttft_valid);
}

TEST_F(PredictedLatencyProducerTest, StepPhaseIsLeftOutWhenTheRequestWouldNotBeNext) {
  services_.source.answers = {{20, 10}, {20, 10}, {20, 10}, {30, 10}};
  SchedulingRequest req = testing::request();
  auto busy = [](const std::string& name) {
    Endpoint e = pod(name);
    e.dispatched = 2;
    e.step = StepTiming{8.0, testing::kNow};
    return e;
  };
  Endpoint queued = busy("queued");
  queued = testing::with_info(queued, [](PodInfo& i) {
    i.metrics.waiting = 1;  // others wait first: how many steps is the model's business
  });
  Endpoint prefilling = busy("prefilling");
  prefilling.prefill_tokens_in_flight = 500;
  Endpoint overrun = busy("overrun");  // 12 ms into an 8-ms step: not a typical step, end unknown
  overrun.step->last_step_end = testing::kNow - std::chrono::milliseconds(12);
  auto eps = run(*make({{"stepPhaseCorrection", true}}), req,
                 {queued, prefilling, overrun, busy("fresh")});
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_phase_ms, 0.0);
  EXPECT_DOUBLE_EQ(eps[1].latency->ttft_phase_ms, 0.0);
  EXPECT_DOUBLE_EQ(eps[2].latency->ttft_phase_ms, 0.0);
  EXPECT_DOUBLE_EQ(eps[3].latency->ttft_phase_ms, 4.0);

  // Every pod predicted the same (a constant model not trained yet): the tie stays a tie.
  services_.source.answers = {{20, 10}, {20, 10}};
  eps = run(*make({{"stepPhaseCorrection", true}}), req, {busy("a"), busy("b")});
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_ttft_ms, 20.0);
  EXPECT_DOUBLE_EQ(eps[0].latency->ttft_phase_ms, 0.0);
  EXPECT_FALSE(
      PredictedLatencyProducer::create("pl", {{"stepPhaseCorrection", "yes"}}, services_.handle())
          .plugin);
}

TEST_F(PredictedLatencyProducerTest, CentralEstimatesAreKeptBesideTheBoundsAndScaledAlike) {
  // Our predictor answers the p90 bound and the median; a reference predictor only the bound.
  services_.source.answers = {{100, 10, 80, 8}, {90, 12}};
  SchedulingRequest req = testing::request();
  req.streaming = true;
  req.slo_ttft_ms = 95;
  Endpoint slow = pod("slow");
  slow.ttft_residual_factor = 1.1;
  slow.tpot_residual_factor = 1.5;
  auto eps = run(*make({{"podResidualCorrection", true}}), req, {slow, pod("ref")});
  ASSERT_TRUE(eps[0].latency && eps[1].latency);
  EXPECT_DOUBLE_EQ(eps[0].latency->expected_ttft_ms, 88);
  EXPECT_DOUBLE_EQ(eps[0].latency->expected_tpot_ms, 12);
  // SLO validity stays with the bound: 110 > 95 although the median (88) would fit.
  EXPECT_DOUBLE_EQ(eps[0].latency->predicted_ttft_ms, 110);
  EXPECT_FALSE(eps[0].latency->ttft_valid);
  EXPECT_DOUBLE_EQ(eps[1].latency->expected_ttft_ms, 90) << "no central estimate: the bound";
  EXPECT_DOUBLE_EQ(eps[1].latency->expected_tpot_ms, 12);
  EXPECT_TRUE(eps[1].latency->ttft_valid);
}

TEST_F(PredictedLatencyProducerTest, WritesNothingWhenDisabledOrNoAnswer) {
  auto p = make({{"predictionDeadlineMs", 20}});
  SchedulingRequest req = testing::request();
  req.prediction_enabled = false;
  auto eps = run(*p, req, {pod("a")});
  EXPECT_FALSE(eps[0].latency);
  EXPECT_EQ(services_.source.calls, 0);

  req.prediction_enabled = true;
  services_.source.fail = true;
  eps = run(*p, req, {pod("a")});
  EXPECT_FALSE(eps[0].latency);
  EXPECT_EQ(services_.source.calls, 1);
  EXPECT_EQ(services_.source.last_deadline, testing::kNow + std::chrono::milliseconds(20));
}

TEST_F(PredictedLatencyProducerTest, NullSourceIsAllowedAndPredictsNothing) {
  Handle h{services_.index, nullptr, nullptr, nullptr};
  auto made = PredictedLatencyProducer::create("pl", nullptr, h);
  ASSERT_TRUE(made.plugin);
  auto p = std::dynamic_pointer_cast<const PredictedLatencyProducer>(made.plugin);
  auto eps = run(*p, testing::request(), {pod("a")});
  EXPECT_FALSE(eps[0].latency);
  EXPECT_FALSE(PredictedLatencyProducer::create("pl", {{"predictionDeadlineMs", 0}}, h).plugin);
}

}  // namespace
}  // namespace llmd::epp
