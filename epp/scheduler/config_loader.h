#pragma once
// Builds a Pipeline generation from the scheduler's YAML configuration:
//
//   plugins:                      # every instance: type, unique name (default: the type),
//   - type: prefix-cache-affinity-filter          # and parameters (default: all defaults)
//     name: strict-affinity
//     parameters: {threshold: 0.99}
//   schedulingProfiles:           # profiles reference plugins by name; scorers take a weight
//   - name: default
//     plugins: [{pluginRef: strict-affinity}, {pluginRef: latency-scorer, weight: 1}]
//
// Data producers and admitters listed under `plugins` run for every request in list order.
// Strict stages: decode the document (unknown keys are errors), instantiate every plugin through
// the registry (its factory validates parameters), build profiles, then check attribute order
// (a producer must run before producers reading its attribute) and add the default producer of
// an attribute some plugin reads and none writes. Every error names the plugin and its type.
// Runs on the thread that (re)loads configuration; the result is immutable.
#include <string>
#include <string_view>

#include "epp/scheduler/handle.h"
#include "epp/scheduler/pipeline.h"
#include "epp/scheduler/registry.h"

namespace llmd::epp {

struct SchedulerMetrics;

struct LoadResult {
  PipelineConstPtr pipeline;  // null on error
  std::string error;
  bool ok() const { return pipeline != nullptr; }
};

LoadResult load_pipeline(std::string_view yaml_text, const PluginRegistry& registry,
                         const Handle& handle, SchedulerMetrics* metrics = nullptr);
LoadResult load_pipeline_file(const std::string& path, const PluginRegistry& registry,
                              const Handle& handle, SchedulerMetrics* metrics = nullptr);

}  // namespace llmd::epp
