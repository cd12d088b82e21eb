#include "epp/feedback/request_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace llmd::epp {
namespace {
// Our own boundaries (the Gateway API Inference Extension's dashboard reads these families'
// quantiles and means, not their bucket edges). 1-ms steps up to 20 ms, then steps of at most
// ~50 %: a pod's TTFT or TPOT near 5 ms falls into a 1-ms bucket, so a quantile interpolated
// inside it is off by less than 1 ms (5-10 ms buckets read 45-88 % high).
prometheus::Histogram::BucketBoundaries millisecond_steps_then(std::vector<double> coarser) {
  prometheus::Histogram::BucketBoundaries b;
  for (int ms = 1; ms <= 20; ++ms) {
    b.push_back(ms / 1000.0);
  }
  b.insert(b.end(), coarser.begin(), coarser.end());
  return b;
}
// TTFT, its predictions and the end-to-end duration: 1 ms .. 60 s (38 buckets).
const prometheus::Histogram::BucketBoundaries kSeconds = millisecond_steps_then(
    {0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30, 60});
// TPOT and its predictions: 1 ms .. 1.28 s (31 buckets).
const prometheus::Histogram::BucketBoundaries kTpotSeconds =
    millisecond_steps_then({0.025, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.16, 0.32, 0.64, 1.28});
const prometheus::Histogram::BucketBoundaries kDelaySeconds = {
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
// The Gateway API Inference Extension's predictionLatencyBuckets (100 us .. 5 s).
const prometheus::Histogram::BucketBoundaries kPredictionSeconds = {
    0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0};
constexpr const char* kPrefix = "inference_objective_request_";
}  // namespace

struct RequestMetrics::Families {
  explicit Families(prometheus::Registry& r) {
    auto hist = [&](const std::string& name, const std::string& help) {
      return &prometheus::BuildHistogram().Name(kPrefix + name).Help(help).Register(r);
    };
    auto gauge = [&](const std::string& name, const std::string& help) {
      return &prometheus::BuildGauge().Name(kPrefix + name).Help(help).Register(r);
    };
    auto counter = [&](const std::string& name, const std::string& help) {
      return &prometheus::BuildCounter().Name(kPrefix + name).Help(help).Register(r);
    };
    ttft = hist("ttft_seconds",
                "Observed time to first token of streamed responses, from the request's arrival "
                "at the EPP (a non-streaming answer has no first token and is not counted)");
    // The Gateway API Inference Extension's name for the end-to-end latency.
    duration = hist("duration_seconds",
                    "End-to-end latency of every answered request, streamed or not, from its "
                    "arrival at the EPP to the last byte");
    dispatch_delay = &prometheus::BuildHistogram()
                          .Name("llmd_epp_dispatch_delay_seconds")
                          .Help(
                              "Arrival at the EPP to dispatch to a pod: router queue and "
                              "scheduling (included in the TTFT and the duration)")
                          .Register(r);
    ttft_gauge = gauge("ttft_seconds_gauge", "Last observed time to first token (streams)");
    predicted_ttft = hist("predicted_ttft_seconds", "Predicted TTFT of the picked pod");
    predicted_ttft_gauge = gauge("predicted_ttft_seconds_gauge", "Last predicted TTFT");
    ttft_prediction = hist("ttft_prediction_duration_seconds",
                           "Time the request's latency predictions took (asked -> answered; one "
                           "call predicts TTFT and TPOT for every candidate)");
    ttft_prediction_gauge = gauge("ttft_prediction_duration_seconds_gauge",
                                  "Latest duration of a request's TTFT prediction");
    expected_ttft = &prometheus::BuildHistogram()
                         .Name("llmd_epp_request_expected_ttft_seconds")
                         .Help(
                             "Expected TTFT of the picked pod: the model's central estimate "
                             "(the predicted TTFT is its p90 bound under the quantile "
                             "objective)")
                         .Register(r);
    expected_tpot = &prometheus::BuildHistogram()
                         .Name("llmd_epp_request_expected_tpot_seconds")
                         .Help(
                             "Expected TPOT of the picked pod: the model's central estimate "
                             "(the predicted TPOT is its p90 bound under the quantile "
                             "objective)")
                         .Register(r);
    tpot = hist("tpot_seconds", "Observed time per output token");
    tpot_gauge = gauge("tpot_seconds_gauge", "Last observed TPOT");
    predicted_tpot = hist("predicted_tpot_seconds", "Predicted TPOT of the picked pod");
    predicted_tpot_gauge = gauge("predicted_tpot_seconds_gauge", "Last predicted TPOT");
    tpot_prediction = hist("tpot_prediction_duration_seconds",
                           "Time the request's latency predictions took (the same call as the "
                           "TTFT prediction's)");
    tpot_prediction_gauge = gauge("tpot_prediction_duration_seconds_gauge",
                                  "Latest duration of a request's TPOT prediction");
    ttft_violation = gauge("ttft_slo_violation", "1 when the last stream missed its TTFT SLO");
    ttft_violation_total =
        counter("ttft_slo_violation_total", "Streams that missed their TTFT SLO");
    tpot_violation = gauge("tpot_slo_violation", "1 when the last request missed its TPOT SLO");
    tpot_violation_total =
        counter("tpot_slo_violation_total", "Requests that missed their TPOT SLO");
    ttft_threshold = gauge("ttft_slo_threshold_seconds", "TTFT SLO of the last stream with one");
    tpot_threshold = gauge("tpot_slo_threshold_seconds", "TPOT SLO of the last request with one");
    // The Gateway API Inference Extension's code names for the gauges and violations above.
    consolidated = &prometheus::BuildGauge()
                        .Name("inference_objective_inference_request_metric")
                        .Help(
                            "Latest value by type (ttft, predicted_ttft, "
                            "ttft_prediction_duration, ttft_slo_violation and the same for "
                            "tpot): the *_gauge and *_slo_violation series in one family")
                        .Register(r);
    violations = counter("slo_violation_total", "SLO violations by type (ttft, tpot)");
    requests = &prometheus::BuildCounter()
                    .Name("llmd_epp_requests_total")
                    .Help(
                        "Client requests by model and the HTTP status the client got (the "
                        "EPP's own answers included, once per request)")
                    .Register(r);
    pod_attempts = &prometheus::BuildCounter()
                        .Name("llmd_epp_pod_attempts_total")
                        .Help(
                            "Requests sent to pods, retries included, by the pod's status "
                            "(502: refused or closed before answering, 504: no first byte in time)")
                        .Register(r);
  }
  prometheus::Family<prometheus::Histogram>*ttft, *duration, *predicted_ttft, *expected_ttft, *tpot,
      *predicted_tpot, *expected_tpot, *dispatch_delay, *ttft_prediction, *tpot_prediction;
  prometheus::Family<prometheus::Gauge>*ttft_gauge, *predicted_ttft_gauge, *tpot_gauge,
      *predicted_tpot_gauge, *ttft_violation, *tpot_violation, *ttft_threshold, *tpot_threshold,
      *ttft_prediction_gauge, *tpot_prediction_gauge, *consolidated;
  prometheus::Family<prometheus::Counter>*ttft_violation_total, *tpot_violation_total, *violations,
      *requests, *pod_attempts;
};

// A latest-value gauge of ours and its series in the consolidated family.
struct LatestValue {
  prometheus::Gauge* ours;
  prometheus::Gauge* consolidated;
  void set(double v) const {
    ours->Set(v);
    consolidated->Set(v);
  }
};

struct RequestMetrics::Children {
  Children(Families& f, const std::string& model, const std::string& target_model) {
    prometheus::Labels l{{"model_name", model}, {"target_model_name", target_model}};
    auto latest = [&](prometheus::Family<prometheus::Gauge>* ours, const char* type) {
      prometheus::Labels typed = l;
      typed.emplace("type", type);
      return LatestValue{&ours->Add(l), &f.consolidated->Add(typed)};
    };
    auto violations = [&](prometheus::Family<prometheus::Counter>* ours, const char* type) {
      prometheus::Labels typed = l;
      typed.emplace("type", type);
      return std::make_pair(&ours->Add(l), &f.violations->Add(typed));
    };
    ttft = &f.ttft->Add(l, kSeconds);
    duration = &f.duration->Add(l, kSeconds);
    predicted_ttft = &f.predicted_ttft->Add(l, kSeconds);
    expected_ttft = &f.expected_ttft->Add(l, kSeconds);
    tpot = &f.tpot->Add(l, kTpotSeconds);
    predicted_tpot = &f.predicted_tpot->Add(l, kTpotSeconds);
    expected_tpot = &f.expected_tpot->Add(l, kTpotSeconds);
    ttft_prediction = &f.ttft_prediction->Add(l, kPredictionSeconds);
    tpot_prediction = &f.tpot_prediction->Add(l, kPredictionSeconds);
    dispatch_delay = &f.dispatch_delay->Add({{"model_name", model}}, kDelaySeconds);
    ttft_gauge = latest(f.ttft_gauge, "ttft");
    predicted_ttft_gauge = latest(f.predicted_ttft_gauge, "predicted_ttft");
    ttft_prediction_gauge = latest(f.ttft_prediction_gauge, "ttft_prediction_duration");
    tpot_gauge = latest(f.tpot_gauge, "tpot");
    predicted_tpot_gauge = latest(f.predicted_tpot_gauge, "predicted_tpot");
    tpot_prediction_gauge = latest(f.tpot_prediction_gauge, "tpot_prediction_duration");
    ttft_violation = latest(f.ttft_violation, "ttft_slo_violation");
    tpot_violation = latest(f.tpot_violation, "tpot_slo_violation");
    ttft_threshold = &f.ttft_threshold->Add(l);
    tpot_threshold = &f.tpot_threshold->Add(l);
    ttft_violations = violations(f.ttft_violation_total, "ttft");
    tpot_violations = violations(f.tpot_violation_total, "tpot");
    requests = f.requests;
    model_name = model;
  }
  prometheus::Histogram *ttft, *duration, *predicted_ttft, *expected_ttft, *tpot, *predicted_tpot,
      *expected_tpot, *ttft_prediction, *tpot_prediction, *dispatch_delay;
  LatestValue ttft_gauge, predicted_ttft_gauge, ttft_prediction_gauge, tpot_gauge,
      predicted_tpot_gauge, tpot_prediction_gauge, ttft_violation, tpot_violation;
  prometheus::Gauge *ttft_threshold, *tpot_threshold;
  // Ours (ttft_slo_violation_total) and the consolidated slo_violation_total{type}.
  std::pair<prometheus::Counter*, prometheus::Counter*> ttft_violations, tpot_violations;
  prometheus::Family<prometheus::Counter>* requests;
  std::map<int, prometheus::Counter*> by_code;
  std::string model_name;
  prometheus::Counter& code(int status) {
    auto it = by_code.find(status);
    if (it == by_code.end()) {
      it = by_code
               .emplace(status, &requests->Add(
                                    {{"model_name", model_name}, {"code", std::to_string(status)}}))
               .first;
    }
    return *it->second;
  }
  // An SLO check: the violation gauges, and the counters when `violated`.
  static void check(const LatestValue& gauge,
                    const std::pair<prometheus::Counter*, prometheus::Counter*>& counters,
                    bool violated) {
    gauge.set(violated ? 1 : 0);
    if (violated) {
      counters.first->Increment();
      counters.second->Increment();
    }
  }
};

RequestMetrics::RequestMetrics(prometheus::Registry& registry, ModelLabels& labels)
    : families_(std::make_unique<Families>(registry)), labels_(labels) {}

RequestMetrics::~RequestMetrics() = default;

RequestMetrics::Children& RequestMetrics::children(const std::string& model,
                                                   const std::string& target_model) {
  auto& c = by_model_[{model, target_model}];
  if (!c) {
    c = std::make_unique<Children>(*families_, model, target_model);
  }
  return *c;
}

void RequestMetrics::on_rejected(const std::string& model, int status) {
  const std::string m = labels_.label(model, false);
  std::lock_guard lock(mu_);
  children(m, m).code(status).Increment();
}

void RequestMetrics::on_completed(const CompletedRequest& done) {
  const bool served = done.success;
  const std::string model = labels_.label(done.request.model, served);
  const std::string target =
      labels_.label(done.target_model.empty() ? done.request.model : done.target_model, served);
  std::lock_guard lock(mu_);
  Children& c = children(model, target);
  families_->pod_attempts->Add({{"code", std::to_string(done.status)}}).Increment();
  if (done.before_response) {
    return;  // the client gets the retry's status, or the EPP's own answer (on_rejected)
  }
  c.code(done.status).Increment();
  if (!done.success) {
    return;
  }
  c.dispatch_delay->Observe(done.dispatch_delay_ms / 1000.0);
  c.duration->Observe((done.dispatch_delay_ms + done.e2e_ms) / 1000.0);
  // Only a stream has a first token the client sees before the end; a non-streaming answer's
  // "TTFT" would be its whole duration and inflate TTFT dashboards (training is apart: it
  // takes that duration on purpose, see training_feedback.cc).
  const bool has_first_token = done.request.streaming && done.first_token;
  const double ttft_s = (done.dispatch_delay_ms + done.ttft_ms) / 1000.0;
  if (has_first_token) {
    c.ttft->Observe(ttft_s);
    c.ttft_gauge.set(ttft_s);
  }
  std::optional<double> tpot_s;
  if (done.request.streaming && done.completion_tokens && *done.completion_tokens > 1) {
    tpot_s =
        (done.e2e_ms - done.ttft_ms) / 1000.0 / static_cast<double>(*done.completion_tokens - 1);
    c.tpot->Observe(*tpot_s);
    c.tpot_gauge.set(*tpot_s);
  }
  if (done.pod.latency) {
    const auto& l = *done.pod.latency;
    c.predicted_ttft->Observe(l.predicted_ttft_ms / 1000.0);
    c.predicted_ttft_gauge.set(l.predicted_ttft_ms / 1000.0);
    c.expected_ttft->Observe(l.expected_ttft_ms / 1000.0);
    c.predicted_tpot->Observe(l.predicted_tpot_ms / 1000.0);
    c.expected_tpot->Observe(l.expected_tpot_ms / 1000.0);
    c.predicted_tpot_gauge.set(l.predicted_tpot_ms / 1000.0);
    if (l.prediction_ms > 0) {
      const double s = l.prediction_ms / 1000.0;
      c.ttft_prediction->Observe(s);
      c.ttft_prediction_gauge.set(s);
      c.tpot_prediction->Observe(s);
      c.tpot_prediction_gauge.set(s);
    }
  }
  if (done.request.slo_ttft_ms && has_first_token) {
    const double slo = *done.request.slo_ttft_ms / 1000.0;
    c.ttft_threshold->Set(slo);
    Children::check(c.ttft_violation, c.ttft_violations, ttft_s > slo);
  }
  if (done.request.slo_tpot_ms && tpot_s) {
    const double slo = *done.request.slo_tpot_ms / 1000.0;
    c.tpot_threshold->Set(slo);
    Children::check(c.tpot_violation, c.tpot_violations, *tpot_s > slo);
  }
}

}  // namespace llmd::epp
