#pragma once
// The EPP's own configuration file (YAML): the pool and where the pipeline comes from.
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
#include <chrono>
#include <string>
#include <vector>

#include "epp/datastore/pod_registry.h"

namespace llmd::epp {

struct EppFileConfig {
  std::vector<PodConfig> pods;
  std::chrono::milliseconds scrape_interval{50};
  std::chrono::milliseconds staleness{2000};
  std::string pipeline_path;  // resolved; empty = pipeline_text holds the plugins
  std::string pipeline_text;
};

// Throws std::runtime_error naming the file and the problem.
EppFileConfig load_epp_config(const std::string& path);

}  // namespace llmd::epp
