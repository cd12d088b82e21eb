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
// When `pipeline` is absent the same document must hold `plugins` and `schedulingProfiles`.
//
// Policies (spec epp.md section 5; each optional, see README "Policies"):
//   objectives: [{name: interactive, priority: 10, sloTtftMs: 500, sloTpotMs: 50}, ...]
//   loadBalancing: lb.yaml     # a gateway-load-balancing-config document: a file (relative to
//                              # this one) or the document inline
//   routerQueue: {policy: fcfs, routerQueueThreshold: 2.0, maxSize: 1000, timeoutMs: 30000}
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epp/datastore/pod_registry.h"
#include "epp/objectives/objectives.h"
#include "epp/queue/queue_config.h"
#include "epp/routing/load_balancing_config.h"

namespace llmd::epp {

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
};

// Where the pool's pods come from: the config file's `pool.pods`, or Kubernetes discovery
// (then the file must not list pods).
enum class PodSource { kConfig, kKubernetes };

// Throws std::runtime_error naming the file and the problem.
EppFileConfig load_epp_config(const std::string& path, PodSource pods_from = PodSource::kConfig);

}  // namespace llmd::epp
