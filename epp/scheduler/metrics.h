#pragma once
// The scheduler's own Prometheus metrics, built once per process (families on the registry) and
// resolved to metric pointers at pipeline load time, so the request path never looks a metric
// up by labels. Thread-safe (prometheus-cpp metrics are).
#include <chrono>
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace llmd::epp {

struct SchedulerMetrics {
  explicit SchedulerMetrics(prometheus::Registry& registry);

  // Load time: the duration histogram of one plugin instance.
  prometheus::Histogram* plugin_duration(std::string_view extension_point, std::string_view type,
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
};

// Observes the time since `start` on `h` (no-op when h is null: metrics not wired, e.g. tests).
void observe_since(prometheus::Histogram* h, std::chrono::steady_clock::time_point start);

}  // namespace llmd::epp
