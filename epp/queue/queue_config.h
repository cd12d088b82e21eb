#pragma once
// The `routerQueue` section of the EPP config (YAML converted with yaml_to_json):
//
//   routerQueue:
//     policy: fcfs               # fcfs | lcfs | wspt | slo-deadline
//     routerQueueThreshold: 2.0  # a number = Dynamo's prefill fraction, or a map of limits:
//     # {prefillFraction, maxBatchedTokens, inFlightRequests, waitingRequests, kvCacheUsage,
//     #  predictedTtftMs}
//     maxSize: 1000
//     timeoutMs: 30000
//     priorityBumpMs: 1000       # 0 = soft priority does not reorder fcfs/lcfs
//     defaultDeadlineMs: 30000   # slo-deadline without a TTFT SLO (default: timeoutMs)
//
// Parsed once at start-up; immutable afterwards.
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "epp/queue/router_queue.h"
#include "epp/queue/saturation.h"

namespace llmd::epp {

struct RouterQueueConfig {
  QueueSettings queue;
  SaturationThresholds saturation = SaturationThresholds::dynamo_default();
};

// `section` is the value of `routerQueue` (null = all defaults). Errors name the key and value.
std::variant<RouterQueueConfig, std::string> parse_router_queue_config(
    const nlohmann::json& section);

}  // namespace llmd::epp
