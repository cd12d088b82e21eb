// RequestContext / PodAttempt: every path gives back what a dispatch took, exactly once.
#include "epp/request/request_context.h"

#include <gtest/gtest.h>

#include "epp/datastore/pod_registry.h"
#include "tests/epp/request/request_test_util.h"

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
using TimePoint = std::chrono::steady_clock::time_point;

using testing::kT0;
using testing::RecordingSink;

class RequestContextTest : public ::testing::Test {
 protected:
  RequestContextTest() {
    testing::add_two_pods(registry_);
    request_.request_id = "r1";
    request_.model = "m";
    request_.input_tokens = 40;
    request_.streaming = true;
  }
  Endpoint pod(const std::string& name) {
    for (auto& e : registry_.candidates(kT0)) {
      if (e.name() == name) {
        return e;
      }
    }
    ADD_FAILURE() << name;
    return {};
  }
  LifecycleServices services() { return {&registry_, &sink_, nullptr}; }

  PodRegistry registry_;
  RecordingSink sink_;
  SchedulingRequest request_;
  Route route_;
};

TEST_F(RequestContextTest, StreamedSuccessMovesPrefillToDecodeAndEndsOnce) {
  RequestContext ctx(services(), kT0);
  {
    PodAttempt attempt = ctx.dispatch(request_, pod("a"), route_, "m", 16, 1, kT0 + 5ms);
    Endpoint a = pod("a");
    EXPECT_EQ(a.dispatched, 1);
    EXPECT_EQ(a.prefill_tokens_in_flight, 40);
    EXPECT_EQ(a.decode_tokens_in_flight, 0);
    attempt.first_token(kT0 + 25ms);
    attempt.first_token(kT0 + 26ms);  // only the first counts
    a = pod("a");
    EXPECT_EQ(a.prefill_tokens_in_flight, 0);
    EXPECT_EQ(a.decode_tokens_in_flight, 16);
    ASSERT_EQ(sink_.first.size(), 1u);
    EXPECT_DOUBLE_EQ(sink_.first[0].ttft_ms, 20);
    EXPECT_DOUBLE_EQ(sink_.first[0].dispatch_delay_ms, 5);
    attempt.answered(200, kT0 + 105ms);
    attempt.client_gone(kT0 + 200ms);  // after the end: nothing
  }
  Endpoint a = pod("a");
  EXPECT_EQ(a.dispatched, 0);
  EXPECT_EQ(a.decode_tokens_in_flight, 0);
  ASSERT_EQ(sink_.completed.size(), 1u);
  EXPECT_TRUE(sink_.completed[0].success);
  EXPECT_EQ(sink_.completed[0].status, 200);
  EXPECT_DOUBLE_EQ(sink_.completed[0].e2e_ms, 100);
  EXPECT_EQ(sink_.completed[0].request.request_id, "r1");
}

TEST_F(RequestContextTest, StreamedTokensTimeThePodsStepsForTheNextCycles) {
  RequestContext ctx(services(), kT0);
  PodAttempt one = ctx.dispatch(request_, pod("a"), route_, "m", 64, 1, kT0);
  PodAttempt two = ctx.dispatch(request_, pod("a"), route_, "m", 64, 1, kT0);
  EXPECT_FALSE(pod("a").step) << "no step measured yet";
  one.streamed(1, kT0 + 30ms);  // the first token: its gap is the TTFT, not a step
  EXPECT_FALSE(pod("a").step);
  ASSERT_EQ(sink_.first.size(), 1u) << "the first content chunk is the first token";
  EXPECT_DOUBLE_EQ(sink_.first[0].ttft_ms, 30);
  one.streamed(2, kT0 + 40ms);  // one step of 10 ms
  ASSERT_TRUE(pod("a").step);
  EXPECT_DOUBLE_EQ(pod("a").step->step_ms, 10);
  EXPECT_EQ(pod("a").step->last_step_end, kT0 + 40ms);
  one.streamed(2, kT0 + 45ms);  // nothing new
  EXPECT_EQ(pod("a").step->last_step_end, kT0 + 40ms);
  // A late read carrying three tokens spans three steps (of 10 ms): the estimate holds.
  one.streamed(5, kT0 + 70ms);
  EXPECT_DOUBLE_EQ(pod("a").step->step_ms, 10);
  // Another stream of the same pod ends the same steps; its 20 ms gap moves the average.
  two.streamed(1, kT0 + 50ms);
  two.streamed(2, kT0 + 70ms);
  EXPECT_DOUBLE_EQ(pod("a").step->step_ms, 10 + 0.3 * (20 - 10));
  EXPECT_EQ(pod("a").step->last_step_end, kT0 + 70ms);
  // A token reported late by a slower relay never moves the step end back.
  one.streamed(6, kT0 + 69ms);
  EXPECT_EQ(pod("a").step->last_step_end, kT0 + 70ms);
  EXPECT_FALSE(pod("b").step) << "each pod has its own clock";
  one.answered(200, kT0 + 80ms);
  two.answered(200, kT0 + 80ms);
}

TEST_F(RequestContextTest, TheTrainingTtftIsThePhaseNeutralOne) {
  RequestContext ctx(services(), kT0);
  Endpoint a = pod("a");
  LatencyPredictionInfo info;
  info.predicted_ttft_ms = 24, info.expected_ttft_ms = 20, info.ttft_phase_ms = 4;
  info.model_ttft_ms = 20, info.unphased_ttft_ms = 20, info.unphased_expected_ttft_ms = 16;
  a.latency = info;
  PodAttempt attempt = ctx.dispatch(request_, a, route_, "m", 8, 1, kT0);
  attempt.streamed(1, kT0 + 25ms);
  ASSERT_EQ(sink_.first.size(), 1u);
  EXPECT_DOUBLE_EQ(sink_.first[0].ttft_ms, 25) << "what the client saw";
  EXPECT_DOUBLE_EQ(sink_.first[0].phase_neutral_ttft_ms(), 21) << "what the model learns";
  attempt.answered(200, kT0 + 60ms);
}

TEST_F(RequestContextTest, AnAttemptNobodyEndedCountsAsAClientThatLeft) {
  {
    RequestContext ctx(services(), kT0);
    PodAttempt attempt = ctx.dispatch(request_, pod("b"), route_, "m", 8, 1, kT0);
    PodAttempt moved = std::move(attempt);  // the moved-from ticket owns nothing
    EXPECT_EQ(pod("b").dispatched, 1);
  }
  EXPECT_EQ(pod("b").dispatched, 0);
  EXPECT_EQ(pod("b").prefill_tokens_in_flight, 0);
  ASSERT_EQ(sink_.completed.size(), 1u);
  EXPECT_TRUE(sink_.completed[0].client_aborted);
  EXPECT_EQ(sink_.completed[0].status, 499);
}

TEST_F(RequestContextTest, PodFailuresInARowEjectThePodAndAnAnswerBreaksTheRun) {
  OutlierDetectionOptions outliers;
  outliers.consecutive_failures = 2;
  outliers.base_ejection = 5s;
  outliers.max_ejection = 50s;
  registry_.configure_outlier_detection(outliers);
  {
    RequestContext earlier(services(), kT0);
    earlier.dispatch(request_, pod("a"), route_, "m", 8, 1, kT0).pod_failed(502, false, kT0);
    earlier.dispatch(request_, pod("a"), route_, "m", 8, 2, kT0).answered(400, kT0);
    earlier.dispatch(request_, pod("a"), route_, "m", 8, 3, kT0).pod_failed(500, true, kT0);
  }
  EXPECT_EQ(registry_.candidates(kT0 + 1s).size(), 2u) << "a 4xx answer broke the run";
  sink_.completed.clear();
  RequestContext ctx(services(), kT0);
  PodAttempt first = ctx.dispatch(request_, pod("a"), route_, "m", 8, 1, kT0);
  first.pod_failed(503, true, kT0 + 1ms);
  EXPECT_EQ(registry_.candidates(kT0 + 1s).size(), 1u);  // a is out, b stays
  PodAttempt second = ctx.dispatch(request_, pod("b"), route_, "m", 8, 2, kT0 + 2ms);
  second.answered(200, kT0 + 50ms);
  ASSERT_EQ(sink_.completed.size(), 2u);
  EXPECT_TRUE(sink_.completed[0].before_response);
  EXPECT_FALSE(sink_.completed[0].success);
  EXPECT_EQ(sink_.completed[1].attempts, 2);
  EXPECT_DOUBLE_EQ(sink_.completed[1].dispatch_delay_ms, 2);
  PodMetrics fresh;
  fresh.scraped_at = kT0 + 6s;
  registry_.update_metrics("a", fresh);
  registry_.update_metrics("b", fresh);
  auto later = registry_.candidates(kT0 + 6s);  // a is back after its 5 s ejection
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[0].dispatched + later[1].dispatched, 0);
}

TEST_F(RequestContextTest, UpstreamUrlTargetsTouchNoPodBookkeeping) {
  Route url;
  PodInfo target;
  target.name = "https://api.example";
  target.address = "api.example:443";
  const Endpoint upstream = Endpoint::of(std::move(target));
  url.upstream = upstream;
  RequestContext ctx(services(), kT0);
  PodAttempt attempt = ctx.dispatch(request_, upstream, url, "m", 8, 1, kT0);
  attempt.pod_failed(502, true, kT0);
  EXPECT_EQ(registry_.candidates(kT0).size(), 2u);
  ASSERT_EQ(sink_.completed.size(), 1u);
  EXPECT_TRUE(sink_.completed[0].upstream_url);
}

TEST_F(RequestContextTest, RejectionsReachTheSink) {
  RequestContext ctx(services(), kT0);
  ctx.rejected("m", 429);
  ASSERT_EQ(sink_.rejected.size(), 1u);
  EXPECT_EQ(sink_.rejected[0], (std::pair<std::string, int>{"m", 429}));
}

TEST_F(RequestContextTest, AStreamedRequestPastItsBoundMakesThePodLateUntilItsFirstToken) {
  RequestContext ctx(services(), kT0);
  Endpoint a = pod("a");
  LatencyPredictionInfo info;
  info.predicted_ttft_ms = 50;
  info.model_ttft_ms = 40;
  a.latency = info;
  PodAttempt first = ctx.dispatch(request_, a, route_, "m", 16, 1, kT0);
  info.predicted_ttft_ms = 130;  // 30 of them already lateness: due at the model's 100 ms
  info.ttft_late_ms = 30;
  a.latency = info;
  PodAttempt second = ctx.dispatch(request_, a, route_, "m", 16, 1, kT0 + 10ms);
  EXPECT_DOUBLE_EQ(registry_.candidates(kT0 + 50ms)[0].ttft_late_ms, 0) << "not overdue yet";
  EXPECT_DOUBLE_EQ(registry_.candidates(kT0 + 80ms)[0].ttft_late_ms, 30);
  first.first_token(kT0 + 90ms);
  EXPECT_DOUBLE_EQ(registry_.candidates(kT0 + 120ms)[0].ttft_late_ms, 10)
      << "the second request, due at 10 + 100 ms";
  second.pod_failed(503, true, kT0 + 120ms);  // ended without a first token
  EXPECT_DOUBLE_EQ(registry_.candidates(kT0 + 200ms)[0].ttft_late_ms, 0);

  // Not tracked: a request without a prediction, with one the model could not tell apart
  // from other pods', or not streamed (no first-token event).
  PodAttempt blind = ctx.dispatch(request_, pod("a"), route_, "m", 16, 1, kT0 + 200ms);
  info.model_ttft_ms = 0;
  a.latency = info;
  PodAttempt indistinct = ctx.dispatch(request_, a, route_, "m", 16, 1, kT0 + 200ms);
  info.model_ttft_ms = 40;
  a.latency = info;
  request_.streaming = false;
  PodAttempt whole = ctx.dispatch(request_, a, route_, "m", 16, 1, kT0 + 200ms);
  EXPECT_DOUBLE_EQ(registry_.candidates(kT0 + 1s)[0].ttft_late_ms, 0);
}

}  // namespace
}  // namespace llmd::epp
