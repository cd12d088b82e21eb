#pragma once
// The scheduler's own Prometheus metrics, built once per process (families on the registry) and
// resolved to metric pointers at pipeline load time, so the request path never looks a metric
// up by labels. Thread-safe (prometheus-cpp metrics are). Beside ours, the Gateway API
// Inference Extension's (GIE v1.5.0) scheduler families under its names and label names.
#include <chrono>
#include <string>
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "epp/scheduler/plugin_timer.h"

namespace llmd::epp {

struct SchedulerMetrics {
  explicit SchedulerMetrics(prometheus::Registry& registry);

  // Load time: the duration histograms of one plugin instance.
  PluginTimer plugin_duration(std::string_view extension_point, std::string_view type,
                              std::string_view name);

  // llmd_epp_plugin_duration_seconds{extension_point, plugin_type, plugin_name}
  prometheus::Family<prometheus::Histogram>& plugin_duration_family;
  // llmd_epp_scheduling_duration_seconds: producers + admitters + profile + on_picked
  prometheus::Histogram& scheduling_duration;
  // llmd_epp_scheduling_results_total{outcome="picked|denied|no_candidates"}
  prometheus::Family<prometheus::Counter>& results_family;
  prometheus::Counter& picked;
  prometheus::Counter& denied;
  prometheus::Counter& no_candidates;
  // llmd_epp_scheduling_predictions_total{used="true|false"}: cycles with/without predictions
  prometheus::Family<prometheus::Counter>& predictions_family;
  prometheus::Counter& with_predictions;
  prometheus::Counter& without_predictions;
  // llmd_epp_producer_failures_total: producers that threw (their attribute stays absent)
  prometheus::Counter& producer_failures;

  // GIE: inference_extension_plugin_duration_seconds{extension_point, plugin_type,
  // plugin_name}, with GIE's extension point names (Filter, Scorer, Picker, ...).
  prometheus::Family<prometheus::Histogram>& gie_plugin_duration_family;
  // GIE: inference_extension_scheduler_e2e_duration_seconds: one profile run (filters ->
  // scorers -> picker), as GIE's Scheduler.Schedule.
  prometheus::Histogram& gie_scheduler_e2e;
  // GIE: inference_extension_scheduler_attempts_total{status, target_model_name, pod_name,
  // namespace, port}; per profile run: success with the picked pod, or failure.
  prometheus::Family<prometheus::Counter>& gie_scheduler_attempts;
  // The namespace label of the picked pods ("" outside Kubernetes). Set before requests.
  std::string pod_namespace;
  // One GIE scheduling attempt: `pod` ("ip:port" `address`) picked, or failure (pod empty).
  void gie_attempt(const std::string& target_model, const std::string& pod = {},
                   const std::string& address = {});
};

// Observes the time since `start` on `h` (no-op when h is null: metrics not wired, e.g. tests).
void observe_since(prometheus::Histogram* h, std::chrono::steady_clock::time_point start);

}  // namespace llmd::epp
