// GIE v1.5.0's per-request and flow-control families without sockets: scripted dispatch and
// completion records into GieRequestMetrics, scripted pool state behind an AdmissionGate.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "common/metrics/exposition.h"
#include "epp/feedback/gie_request_metrics.h"
#include "epp/queue/admission_gate.h"
#include "epp/queue/flow_control_metrics.h"

namespace llmd::epp {
namespace {

// The value of the sample line that starts with `series` (name and labels as serialised); -1
// when there is none.
double sample(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) {
    return -1;
  }
  const auto start = at + series.size() + 2;
  return std::stod(text.substr(start, text.find('\n', start) - start));
}

CompletedRequest dispatched(const std::string& model, int attempt = 1) {
  CompletedRequest r;
  r.request.model = model;
  r.request.body_bytes = 300;
  r.target_model = model;
  r.attempts = attempt;
  return r;
}

TEST(GieErrorCode, TheEppsOwnAnswersMapToGiesCodes) {
  EXPECT_STREQ(gie_error_code(400), "BadRequest");
  EXPECT_STREQ(gie_error_code(413), "BadRequest");
  EXPECT_STREQ(gie_error_code(404), "NotFound");
  EXPECT_STREQ(gie_error_code(429), "ResourceExhausted");
  EXPECT_STREQ(gie_error_code(503), "ServiceUnavailable");
  EXPECT_STREQ(gie_error_code(502), "ModelServerError");
  EXPECT_STREQ(gie_error_code(504), "ModelServerError");
  EXPECT_STREQ(gie_error_code(418), "Unknown");
}

TEST(GieRequestMetrics, CountsARequestOnceAndEachErrorOnce) {
  prometheus::Registry registry;
  ModelLabels labels;
  labels.set_pool_serves([](const std::string& m) { return m == "m"; });
  GieRequestMetrics gie(registry, labels);
  // Attempt 1 fails before the response, the retry answers 200.
  CompletedRequest first = dispatched("m", 1);
  gie.on_dispatched(first);
  first.before_response = true;
  first.status = 502;
  gie.on_completed(first);
  CompletedRequest retry = dispatched("m", 2);
  gie.on_dispatched(retry);
  retry.success = true;
  retry.status = 200;
  retry.response_bytes = 1000;
  retry.completion_tokens = 10;
  retry.e2e_ms = 100;
  gie.on_completed(retry);
  // A pod's 500 after the response began; a client that left; the EPP's own 429.
  CompletedRequest failed = dispatched("m");
  gie.on_dispatched(failed);
  failed.status = 500;
  gie.on_completed(failed);
  CompletedRequest gone = dispatched("m");
  gie.on_dispatched(gone);
  gone.client_aborted = true;
  gone.status = 499;
  gie.on_completed(gone);
  gie.on_rejected("m", 429);
  gie.refresh();
  const std::string text = metrics::serialize(registry);
  const std::string m = "model_name=\"m\"";
  EXPECT_EQ(sample(text, "inference_objective_request_total{" + m +
                             ",priority=\"0\",target_model_name=\"m\"}"),
            3)
      << text;
  EXPECT_EQ(
      sample(text, "inference_objective_request_error_total{error_code=\"ModelServerError\"," + m +
                       ",target_model_name=\"m\"}"),
      1);
  EXPECT_EQ(
      sample(text, "inference_objective_request_error_total{error_code=\"ResourceExhausted\"," + m +
                       ",target_model_name=\"m\"}"),
      1);
  EXPECT_EQ(
      sample(text, "inference_objective_request_sizes_count{" + m + ",target_model_name=\"m\"}"),
      3);
  EXPECT_EQ(
      sample(text, "inference_objective_response_sizes_sum{" + m + ",target_model_name=\"m\"}"),
      1000);
  EXPECT_NEAR(sample(text, "inference_objective_normalized_time_per_output_token_seconds_sum{" + m +
                               ",target_model_name=\"m\"}"),
              0.01, 1e-9);
  EXPECT_EQ(sample(text, "inference_objective_running_requests{" + m + "}"), 0);
}

// A model's label may change while its requests run (its first success makes the name a label
// of its own): the running gauge follows, and never stays up under the old label.
TEST(GieRequestMetrics, RunningRequestsFollowTheLabelOfTheirModel) {
  prometheus::Registry registry;
  ModelLabels labels;
  GieRequestMetrics gie(registry, labels);
  CompletedRequest a = dispatched("new"), b = dispatched("new");
  gie.on_dispatched(a);
  gie.on_dispatched(b);
  gie.refresh();
  std::string text = metrics::serialize(registry);
  EXPECT_EQ(sample(text, "inference_objective_running_requests{model_name=\"other\"}"), 2) << text;
  a.success = true;
  a.status = 200;
  gie.on_completed(a);
  gie.refresh();
  text = metrics::serialize(registry);
  EXPECT_EQ(sample(text, "inference_objective_running_requests{model_name=\"other\"}"), 0) << text;
  EXPECT_EQ(sample(text, "inference_objective_running_requests{model_name=\"new\"}"), 1);
  b.success = true;
  b.status = 200;
  gie.on_completed(b);
  gie.refresh();
  text = metrics::serialize(registry);
  EXPECT_EQ(sample(text, "inference_objective_running_requests{model_name=\"new\"}"), 0);
}

// The router queue under GIE's flow-control names: who entered, how each left.
struct GateFixture {
  std::vector<Endpoint> pods;
  prometheus::Registry registry;
  FlowControlMetrics gie{registry, [](const std::string& p) { return p.empty() ? "pool" : p; },
                         [](const std::string& m) { return m; }};
  AdmissionGate gate{[this](const std::string&) { return pods; }, &registry, &gie};

  GateFixture() {
    PodInfo pod;
    pod.name = "pod-0";
    pods.push_back(Endpoint::of(std::move(pod)));
    RouterQueueConfig c;
    c.queue.max_size = 1;
    c.queue.timeout = std::chrono::milliseconds(1000);
    c.saturation = SaturationThresholds{};
    c.saturation.in_flight_requests = 1;
    gate.configure(c);
  }
  AdmissionGate::Ticket enter(
      std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
    AdmissionRequest r;
    r.model = "m";
    r.body_bytes = 100;
    return gate.enter(
        r, [](AdmissionVerdict) {}, now);
  }
  std::string text() { return metrics::serialize(registry); }
};

std::string outcome_count(const char* outcome) {
  return std::string(
             "inference_extension_flow_control_request_queue_duration_seconds_count{"
             "fairness_id=\"default-flow\",inference_pool=\"pool\",model_name=\"m\","
             "outcome=\"") +
         outcome + "\",priority=\"0\",target_model_name=\"m\"}";
}

TEST(FlowControlMetrics, EveryWayOutOfTheRouterQueueHasItsOutcome) {
  GateFixture f;
  f.enter();                // the pod is free: in and out
  f.gate.on_scheduled("");  // ... and dispatched there
  f.pods[0].dispatched = 1;
  const auto t0 = std::chrono::steady_clock::now();
  const auto waiting = f.enter(t0);
  ASSERT_TRUE(waiting.queued);
  const std::string held =
      "{fairness_id=\"default-flow\",inference_pool=\"pool\","
      "model_name=\"m\",priority=\"0\",target_model_name=\"m\"}";
  std::string text = f.text();
  EXPECT_EQ(sample(text, "inference_extension_flow_control_queue_size" + held), 1) << text;
  EXPECT_EQ(sample(text, "inference_extension_flow_control_queue_bytes" + held), 100);
  EXPECT_FALSE(f.enter(t0).queued);  // the queue holds one: refused
  f.gate.cancel(waiting.id);
  ASSERT_TRUE(f.enter(t0).queued);
  f.gate.tick(t0 + std::chrono::milliseconds(1001));  // past its timeout
  ASSERT_TRUE(f.enter(t0 + std::chrono::milliseconds(1001)).queued);
  f.pods[0].dispatched = 0;
  f.gate.on_finished("");
  text = f.text();
  EXPECT_EQ(sample(text, outcome_count("Dispatched")), 2) << text;
  EXPECT_EQ(sample(text, outcome_count("RejectedCapacity")), 1);
  EXPECT_EQ(sample(text, outcome_count("EvictedContextCancelled")), 1);
  EXPECT_EQ(sample(text, outcome_count("EvictedTTL")), 1);
  EXPECT_EQ(sample(text, "inference_extension_flow_control_queue_size" + held), 0);
  EXPECT_EQ(sample(text, "inference_extension_flow_control_queue_bytes" + held), 0);
  EXPECT_EQ(sample(text,
                   "inference_extension_flow_control_request_enqueue_duration_seconds_count{"
                   "fairness_id=\"default-flow\",outcome=\"NotYetFinalized\",priority=\"0\"}"),
            3);
  EXPECT_GT(sample(text, "inference_extension_flow_control_dispatch_cycle_duration_seconds_count"),
            0);
  // One pod, idle now: nothing saturated.
  EXPECT_EQ(f.gate.saturation(), (std::map<std::string, double>{{"", 0.0}}));
  f.pods[0].dispatched = 1;
  EXPECT_EQ(f.gate.saturation(), (std::map<std::string, double>{{"", 1.0}}));
}

}  // namespace
}  // namespace llmd::epp
