#include "epp/scheduler/metrics.h"

#include <string>

namespace llmd::epp {
namespace {

// 10 us .. ~1.3 s: plugins take microseconds, a prediction wait up to the 50 ms deadline.
prometheus::Histogram::BucketBoundaries duration_buckets() {
  return {1e-5, 2.5e-5, 5e-5,   1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
          5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,    0.25, 0.5,  1.0};
}

// GIE v1.5.0's scheduler and plugin buckets (100 us .. 100 ms).
prometheus::Histogram::BucketBoundaries gie_buckets() {
  return {0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1};
}

// GIE's name of one of our extension points (its scheduler's and director's constants).
std::string gie_extension_point(std::string_view ours) {
  if (ours == "filter") return "Filter";
  if (ours == "scorer") return "Scorer";
  if (ours == "picker") return "Picker";
  if (ours == "producer") return "PrepareData";
  if (ours == "admitter") return "AdmitRequest";
  return std::string(ours);
}

}  // namespace

SchedulerMetrics::SchedulerMetrics(prometheus::Registry& registry)
    : plugin_duration_family(prometheus::BuildHistogram()
                                 .Name("llmd_epp_plugin_duration_seconds")
                                 .Help("Time spent in one scheduling plugin per call")
                                 .Register(registry)),
      scheduling_duration(prometheus::BuildHistogram()
                              .Name("llmd_epp_scheduling_duration_seconds")
                              .Help("Time to schedule one request (producers to pick)")
                              .Register(registry)
                              .Add({}, duration_buckets())),
      results_family(prometheus::BuildCounter()
                         .Name("llmd_epp_scheduling_results_total")
                         .Help("Scheduling cycles by outcome")
                         .Register(registry)),
      picked(results_family.Add({{"outcome", "picked"}})),
      denied(results_family.Add({{"outcome", "denied"}})),
      no_candidates(results_family.Add({{"outcome", "no_candidates"}})),
      predictions_family(prometheus::BuildCounter()
                             .Name("llmd_epp_scheduling_predictions_total")
                             .Help("Scheduling cycles with / without latency predictions")
                             .Register(registry)),
      with_predictions(predictions_family.Add({{"used", "true"}})),
      without_predictions(predictions_family.Add({{"used", "false"}})),
      producer_failures(prometheus::BuildCounter()
                            .Name("llmd_epp_producer_failures_total")
                            .Help("Data producer calls that failed (attribute left absent)")
                            .Register(registry)
                            .Add({})),
      gie_plugin_duration_family(
          prometheus::BuildHistogram()
              .Name("inference_extension_plugin_duration_seconds")
              .Help("[ALPHA] Plugin processing latency distribution in seconds for each "
                    "extension point, plugin type and plugin name.")
              .Register(registry)),
      gie_scheduler_e2e(prometheus::BuildHistogram()
                            .Name("inference_extension_scheduler_e2e_duration_seconds")
                            .Help("[ALPHA] End-to-end scheduling latency distribution in "
                                  "seconds (one profile run: filters, scorers, picker).")
                            .Register(registry)
                            .Add({}, gie_buckets())),
      gie_scheduler_attempts(prometheus::BuildCounter()
                                 .Name("inference_extension_scheduler_attempts_total")
                                 .Help("[ALPHA] Total number of scheduling attempts.")
                                 .Register(registry)) {}

PluginTimer SchedulerMetrics::plugin_duration(std::string_view extension_point,
                                              std::string_view type, std::string_view name) {
  return {
      &plugin_duration_family.Add({{"extension_point", std::string(extension_point)},
                                   {"plugin_type", std::string(type)},
                                   {"plugin_name", std::string(name)}},
                                  duration_buckets()),
      &gie_plugin_duration_family.Add({{"extension_point", gie_extension_point(extension_point)},
                                       {"plugin_type", std::string(type)},
                                       {"plugin_name", std::string(name)}},
                                      gie_buckets())};
}

void SchedulerMetrics::gie_attempt(const std::string& target_model, const std::string& pod,
                                   const std::string& address) {
  const auto colon = address.rfind(':');
  const std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
  gie_scheduler_attempts
      .Add({{"status", pod.empty() ? "failure" : "success"},
            {"target_model_name", target_model},
            {"pod_name", pod},
            {"namespace", pod.empty() ? "" : pod_namespace},
            {"port", port}})
      .Increment();
}

void observe_since(prometheus::Histogram* h, std::chrono::steady_clock::time_point start) {
  if (h != nullptr) {
    h->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

void observe_since(const PluginTimer& t, std::chrono::steady_clock::time_point start) {
  if (t.ours == nullptr && t.gie == nullptr) {
    return;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (t.ours != nullptr) {
    t.ours->Observe(s);
  }
  if (t.gie != nullptr) {
    t.gie->Observe(s);
  }
}

}  // namespace llmd::epp
