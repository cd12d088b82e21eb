#pragma once
// The EPP config file's tuning sections that are read once, at start:
//
//   scrapeIntervalMs: 50           # how often each pod's /metrics is read
//   stalenessMs: 2000              # pods whose metrics are older are not candidates
//   requests:   {predictionBasedScheduling: true, forwardPriority: true}
//   proxy:      {headerTimeoutMs: 10000, idleTimeoutMs: 60000, upstreamFirstByteTimeoutMs: 30000}
//   outlierDetection: {consecutiveFailures: 5, baseEjectionMs: 30000, maxEjectionMs: 300000,
//                      maxEjectionPercent: 10, panicThresholdPercent: 50}
//   leaderElection: {leaseDurationSeconds: 15, renewDeadlineSeconds: 10, retryPeriodSeconds: 2}
//   discovery:  {watchTimeoutSeconds: 300}
//   extProc:    {idleTimeoutMs: 3600000, streamIdleTimeoutMs: 300000, maxConnectionAgeMs: 0,
//                maxConnectionAgeGraceMs: 300000, keepaliveIntervalMs: 7200000,
//                keepaliveTimeoutMs: 20000, maxHeaderListBytes: 65536,
//                connectionBudgetShare: 1, streamBufferBytes: 4194304,
//                connectionBufferBytes: 16777216, maxConnections: 0}
//
// They were flags once; flags are for deployment (ports, addresses, credentials, pool, sidecar
// URLs, budgets), and a setting lives in one place. The components they configure are built
// at start with them, so a reload that changes one is refused with a message naming the key
// (restart to change it), never applied halfway or ignored. kStartupKeys is the one list of
// these keys: the loader accepts exactly these, and the configuration reference and the
// knob-defined-twice test read it.
//
// Pure data and parsing; no thread of its own.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "epp/datastore/outlier_detection.h"

namespace llmd::epp {

struct StartupSettings {
  std::chrono::milliseconds scrape_interval{50};
  std::chrono::milliseconds staleness{2000};
  // requests: both ingresses (proxy and ext_proc).
  bool prediction_based_scheduling = true;  // default of x-prediction-based-scheduling
  bool forward_priority = true;             // soft priority -> vLLM's `priority`
  // proxy: the OpenAI port's timeouts.
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
  std::chrono::milliseconds upstream_first_byte_timeout{30000};
  OutlierDetectionOptions outliers;  // outlierDetection
  // extProc: what one gateway connection may hold on the ext_proc port, and for how long
  // (epp/extproc/grpc_server.h GrpcLimits; 0 ms = off).
  std::chrono::milliseconds ext_proc_idle_timeout{3600000};
  std::chrono::milliseconds ext_proc_stream_idle_timeout{300000};
  std::chrono::milliseconds ext_proc_max_connection_age{0};
  std::chrono::milliseconds ext_proc_max_connection_age_grace{300000};
  std::chrono::milliseconds ext_proc_keepalive_interval{7200000};
  std::chrono::milliseconds ext_proc_keepalive_timeout{20000};
  uint32_t ext_proc_max_header_list_bytes = 64 * 1024;
  double ext_proc_connection_budget_share = 1;
  std::size_t ext_proc_stream_buffer_bytes = 4 * 1024 * 1024;
  std::size_t ext_proc_connection_buffer_bytes = 16 * 1024 * 1024;
  std::size_t ext_proc_max_connections = 0;
  // leaderElection: client-go's durations.
  std::chrono::seconds lease_duration{15};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  // discovery: the Kubernetes watches' timeoutSeconds (DiscoveryOptions::watch_timeout).
  std::chrono::seconds watch_timeout{300};
  // Every key's value as read (or its default), for changed_startup_keys.
  std::map<std::string, double> as_read;

  bool operator==(const StartupSettings&) const = default;
};

// One key of these sections: "section.key" (or a top-level "key"), its default as written in
// YAML, and why an operator would change it.
struct StartupKey {
  std::string_view path;
  std::string_view default_value;
  std::string_view meaning;
};
const std::vector<StartupKey>& startup_keys();

// The top-level keys of the file that belong here (sections and single keys).
bool is_startup_key(std::string_view top_level_key);

// Reads every startup key `root` holds over the defaults. Throws std::runtime_error naming
// the key, its line and the accepted range on a bad value or an unknown key in a section.
StartupSettings read_startup_settings(const YAML::Node& root);

// The keys whose values differ ("" when none): a reload that changes one is refused.
std::string changed_startup_keys(const StartupSettings& before, const StartupSettings& after);

}  // namespace llmd::epp
