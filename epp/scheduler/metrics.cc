#include "epp/scheduler/metrics.h"

#include <string>

namespace llmd::epp {
namespace {

// 10 us .. ~1.3 s: plugins take microseconds, a prediction wait up to the 50 ms deadline.
prometheus::Histogram::BucketBoundaries duration_buckets() {
  return {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1,
          0.25, 0.5, 1.0};
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
                            .Add({})) {}

prometheus::Histogram* SchedulerMetrics::plugin_duration(std::string_view extension_point,
                                                         std::string_view type,
                                                         std::string_view name) {
  return &plugin_duration_family.Add({{"extension_point", std::string(extension_point)},
                                      {"plugin_type", std::string(type)},
                                      {"plugin_name", std::string(name)}},
                                     duration_buckets());
}

void observe_since(prometheus::Histogram* h, std::chrono::steady_clock::time_point start) {
  if (h != nullptr) {
    h->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

}  // namespace llmd::epp
