#pragma once
// The EPP's own configuration file (YAML): the pool and where the pipeline comes from.
// (With Kubernetes discovery the `pool` section is left out: the pods come from the API.)
//
//   pool:
//     pods:
//     - name: pod-0
//       address: 127.0.0.1:9100
//       labels: {role: decode, class: h100}
//   scrapeIntervalMs: 50       # default 50
//   stalenessMs: 2000          # pods older than this are not candidates; default 2000
//   pipeline: default-pipeline.yaml   # plugin config, relative to this file
//
// When `pipeline` is absent the same document must hold `plugins` and `schedulingProfiles`: one
// schema, upstream's EndpointPickerConfig (apiVersion/kind, featureGates, parser, dataLayer, ...:
// config_loader.h) with the keys above and below beside it, so the chart's rendered config
// loads as it is (with Kubernetes discovery the pool section is left out). The pipeline's
// settings for other components (the data layer's ScrapeConfig, the pods' role label) come
// back from the pipeline loader (LoadResult::settings); on a reload the scraper takes the new
// path and engine mappings at once, while a change of scheme or insecureSkipVerify is refused
// until a restart. scrapeIntervalMs and stalenessMs are read at start only.
//
// Policies (spec epp.md section 5; each optional, see README "Policies"):
//   objectives: [{name: interactive, priority: 10, sloTtftMs: 500, sloTpotMs: 50}, ...]
//   loadBalancing: lb.yaml     # a gateway-load-balancing-config document: a file (relative to
//                              # this one) or the document inline
//   routerQueue: {policy: fcfs, routerQueueThreshold: 2.0, maxSize: 1000, timeoutMs: 30000}
//
// The sampled decision log (README "Decisions you can see"), each key over its --decision-log-*
// flag, re-read on every reload (the run-time switch):
//   decisionLog: {sampleRate: 0.01, maxLinesPerSecond: 10, maxCandidates: 10}
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epp/datastore/pod_registry.h"
#include "epp/objectives/objectives.h"
#include "epp/queue/queue_config.h"
#include "epp/scheduler/decision_log.h"
#include "epp/routing/load_balancing_config.h"

namespace llmd::epp {

// The file's `decisionLog` section: the keys it sets, over the flags' settings.
struct DecisionLogOverrides {
  std::optional<double> sample_rate;
  std::optional<double> max_lines_per_second;
  std::optional<std::size_t> max_candidates;
  DecisionLogConfig over(DecisionLogConfig flags) const;
};

struct EppFileConfig {
  std::vector<PodConfig> pods;
  std::chrono::milliseconds scrape_interval{50};
  std::chrono::milliseconds staleness{2000};
  std::string pipeline_path;  // resolved; empty = pipeline_text holds the plugins
  std::string pipeline_text;
  std::shared_ptr<const ObjectiveTable> objectives = std::make_shared<ObjectiveTable>();
  std::optional<routing::LoadBalancingConfig> load_balancing;
  std::string load_balancing_path;  // when loaded from its own file (watched for changes)
  std::optional<RouterQueueConfig> router_queue;
  DecisionLogOverrides decision_log;  // nothing set: the flags' settings
};

// Where the pool's pods come from: the config file's `pool.pods`, or Kubernetes discovery
// (then the file must not list pods).
enum class PodSource { kConfig, kKubernetes };

// Throws std::runtime_error naming the file and the problem.
EppFileConfig load_epp_config(const std::string& path, PodSource pods_from = PodSource::kConfig);

}  // namespace llmd::epp
