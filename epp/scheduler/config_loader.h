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
// Data producers and admitters listed under `plugins` run for every request in list order; a
// profile may list them too (upstream's configs do), which changes nothing: they still run once
// per request, in `plugins` order.
//
// Upstream's EndpointPickerConfig loads as it is: `apiVersion`/`kind` (validated), and
// `featureGates`, `parser`, `requestHandler`, `dataLayer`, `saturationDetector`, `flowControl`,
// each mapped or refused (epp/scheduler/upstream_config.h); plugins that configure the EPP
// rather than a cycle (data layer, parser, profile handler: epp/scheduler/config_plugins.h)
// give LoadResult::settings.
// Strict stages: decode the document (unknown keys are errors), instantiate every plugin through
// the registry (its factory validates parameters), build profiles, then check attribute order
// (a producer must run before producers reading its attribute) and add the default producer of
// an attribute some plugin reads and none writes. Every error names the plugin and its type.
// Runs on the thread that (re)loads configuration; the result is immutable.
#include <array>
#include <string>
#include <string_view>

#include "epp/datastore/scrape_config.h"
#include "epp/scheduler/handle.h"
#include "epp/scheduler/pipeline.h"
#include "epp/scheduler/registry.h"

namespace llmd::epp {

struct SchedulerMetrics;

// The top-level keys of a pipeline document, and the EPP config file's own keys, which may sit
// beside them in one document (the EPP config file then holds its pipeline inline).
inline constexpr std::array<std::string_view, 10> kPipelineKeys = {
    "apiVersion", "kind",           "plugins",   "schedulingProfiles", "featureGates",
    "parser",     "requestHandler", "dataLayer", "saturationDetector", "flowControl"};
inline constexpr std::array<std::string_view, 14> kEppFileKeys = {
    "pool",        "scrapeIntervalMs", "stalenessMs",
    "pipeline",    "objectives",       "loadBalancing",
    "routerQueue", "decisionLog",      "requests",
    "proxy",       "outlierDetection", "leaderElection",
    "extProc",     "discovery"};
enum class Document {
  kPipeline,  // a pipeline file: only kPipelineKeys
  kEppFile,   // the EPP config file with its pipeline inline: kEppFileKeys too (read elsewhere)
};

// What a configuration sets outside the scheduling pipeline, for the components it configures.
struct LoadedSettings {
  ScrapeConfig scrape;  // the data layer: the scraper's scheme, path, TLS and engine mappings
  // The pod label naming a pod's role (prefill | decode) for the whole EPP; "" = no roles.
  std::string endpoint_role_label = "role";
};

struct LoadResult {
  PipelineConstPtr pipeline;  // null on error
  std::string error;
  LoadedSettings settings;
  bool ok() const { return pipeline != nullptr; }
};

LoadResult load_pipeline(std::string_view yaml_text, const PluginRegistry& registry,
                         const Handle& handle, SchedulerMetrics* metrics = nullptr,
                         Document document = Document::kPipeline);
LoadResult load_pipeline_file(const std::string& path, const PluginRegistry& registry,
                              const Handle& handle, SchedulerMetrics* metrics = nullptr);

}  // namespace llmd::epp
