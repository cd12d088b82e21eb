#pragma once
// When the router queue holds requests: every eligible pod is saturated, i.e. has reached at
// least one configured limit (Dynamo's routerQueueThreshold, widened to the signals the EPP has).
// Pure functions over the scheduling snapshot; callable from any thread.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "epp/interface/endpoint.h"

namespace llmd::epp {

// Absent = limit not used. Every limit is "reached" at >=.
struct SaturationThresholds {
  // Dynamo's --router-queue-threshold: EPP in-flight prefill tokens / max_batched_tokens.
  std::optional<double> prefill_fraction;
  int64_t max_batched_tokens = 8192;             // vLLM --max-num-batched-tokens of the pods
  std::optional<int64_t> in_flight_requests;     // EPP-exact dispatched requests on the pod
  std::optional<int64_t> waiting_requests;       // scraped vllm:num_requests_waiting
  std::optional<double> kv_cache_usage;          // scraped KV usage, 0..1
  std::optional<double> predicted_ttft_ms;       // the pod's latest predicted TTFT, when known
  bool any() const;                              // at least one limit set
  static SaturationThresholds dynamo_default();  // prefill fraction 2.0 only
};

// `predicted_ttft_ms` absent = unknown: the TTFT limit cannot be reached (others still apply).
bool pod_saturated(const Endpoint& e, const SaturationThresholds& t,
                   std::optional<double> predicted_ttft_ms);

// The pod's latest predicted TTFT; an empty function reads Endpoint::latency instead.
using PredictedTtftLookup = std::function<std::optional<double>(const Endpoint&)>;

// True when every pod is saturated. An empty pool is not saturated: queueing cannot help, the
// scheduler answers 503 itself.
bool pool_saturated(std::span<const Endpoint> pods, const SaturationThresholds& t,
                    const PredictedTtftLookup& predicted_ttft = {});

}  // namespace llmd::epp
