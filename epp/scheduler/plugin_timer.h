#pragma once
// The duration histograms one plugin instance is timed into, resolved at pipeline load time
// (SchedulerMetrics::plugin_duration): ours and the Gateway API Inference Extension's.
#include <chrono>

namespace prometheus {
class Histogram;
}

namespace llmd::epp {

struct PluginTimer {
  prometheus::Histogram* ours = nullptr;  // llmd_epp_plugin_duration_seconds (null: none)
  prometheus::Histogram* gie = nullptr;   // inference_extension_plugin_duration_seconds
};

// Observes the time since `start` on each histogram of `t` (none: metrics not wired, tests).
void observe_since(const PluginTimer& t, std::chrono::steady_clock::time_point start);

}  // namespace llmd::epp
