#pragma once
// The EPP's own configuration file (YAML): the pool and where the pipeline comes from.
// (With Kubernetes discovery the `pool` section is left out: the pods come from the API.)
//
//   pool:
//     pods:
//     - name: pod-0
//       address: 127.0.0.1:9100
//       labels: {role: decode, class: h100}
//   pipeline: default-pipeline.yaml   # plugin config, relative to this file
//   scrapeIntervalMs, stalenessMs, requests, proxy, outlierDetection, leaderElection,
//   extProc, discovery:        # tuning read at start (startup_settings.h)
//
// When `pipeline` is absent the same document must hold `plugins` and `schedulingProfiles`: one
// schema, upstream's EndpointPickerConfig (apiVersion/kind, featureGates, parser, dataLayer, ...:
// config_loader.h) with the keys above and below beside it, so the chart's rendered config
// loads as it is (with Kubernetes discovery the pool section is left out). The pipeline's
// settings for other components (the data layer's ScrapeConfig, the pods' role label) come
// back from the pipeline loader (LoadResult::settings); on a reload the scraper takes the new
// path and engine mappings at once, while a change of scheme or insecureSkipVerify is refused
// until a restart, as is a change of any setting in startup_settings.h.
//
// Policies (spec epp.md section 5; each optional, see README "Policies"):
//   objectives: [{name: interactive, priority: 10, sloTtftMs: 500, sloTpotMs: 50}, ...]
//   loadBalancing: lb.yaml     # a gateway-load-balancing-config document: a file (relative to
//                              # this one) or the document inline
//   routerQueue: {policy: fcfs, routerQueueThreshold: 2.0, maxSize: 1000, timeoutMs: 30000}
//
// The sampled decision log (docs/operator-guide.md), re-read on every reload (the run-time
// switch); each key left out keeps its default:
//   decisionLog: {sampleRate: 0.01, maxLinesPerSecond: 10, maxCandidates: 10}
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epp/config/startup_settings.h"
#include "epp/datastore/pod_registry.h"
#include "epp/objectives/objectives.h"
#include "epp/queue/queue_config.h"
#include "epp/scheduler/decision_log.h"
#include "epp/routing/load_balancing_config.h"

namespace llmd::epp {

struct EppFileConfig {
  std::vector<PodConfig> pods;
  StartupSettings startup;    // read at start; a reload may not change it
  std::string pipeline_path;  // resolved; empty = pipeline_text holds the plugins
  std::string pipeline_text;
  std::shared_ptr<const ObjectiveTable> objectives = std::make_shared<ObjectiveTable>();
  std::optional<routing::LoadBalancingConfig> load_balancing;
  std::string load_balancing_path;  // when loaded from its own file (watched for changes)
  std::optional<RouterQueueConfig> router_queue;
  DecisionLogConfig decision_log;
};

// Where the pool's pods come from: the config file's `pool.pods`, or Kubernetes discovery
// (then the file must not list pods).
enum class PodSource { kConfig, kKubernetes };

// Throws std::runtime_error naming the file and the problem.
EppFileConfig load_epp_config(const std::string& path, PodSource pods_from = PodSource::kConfig);

}  // namespace llmd::epp
