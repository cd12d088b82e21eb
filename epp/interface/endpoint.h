#pragma once
// What the scheduler knows about one candidate pod during one scheduling cycle: a copy of the
// pod's scraped metrics and the EPP's exact in-flight bookkeeping, plus the typed attributes
// that data producers attach. Plain data; owned by the cycle that made it.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "epp/attributes/latency_prediction_info.h"
#include "epp/attributes/prefix_cache_match_info.h"
#include "epp/interface/step_timing.h"

namespace llmd::epp {

struct PodMetrics {
  double kv_cache_usage = 0;  // 0..1 (vllm:kv_cache_usage_perc, or gpu_cache_usage_perc)
  int64_t waiting = 0;        // vllm:num_requests_waiting
  int64_t running = 0;        // vllm:num_requests_running
  int64_t block_size = 16;    // vllm:cache_config_info{block_size}
  int64_t num_gpu_blocks = 31250;
  // Models the pod serves: the model_name labels of vllm:num_requests_running (for
  // GET /v1/models through the EPP).
  std::vector<std::string> models;
  std::chrono::steady_clock::time_point scraped_at{};
};

struct Endpoint {
  std::string name;     // pod name from the pool config
  std::string address;  // "ip:port"
  std::map<std::string, std::string> labels;  // e.g. role: prefill|decode, class: h100
  PodMetrics metrics;
  int64_t dispatched = 0;                // requests this EPP sent and that have not finished
  int64_t prefill_tokens_in_flight = 0;  // input tokens of dispatched requests before 1st token
  int64_t decode_tokens_in_flight = 0;   // output tokens budgeted by requests past 1st token
  // The TTFT predicted for this pod by the latest scheduling cycle that had predictions (a
  // load signal for the router queue's predictedTtftMs limit; never used as this cycle's
  // prediction).
  std::optional<double> last_predicted_ttft_ms;
  // How much slower (> 1) or faster (< 1) than its pool's other pods this pod's first tokens
  // and output tokens came, against the model's predictions (PodResidual): the pod effect the
  // shared model cannot see. 1 = no significant difference.
  double ttft_residual_factor = 1.0;
  double tpot_residual_factor = 1.0;
  // How far past its predicted TTFT bound the most overdue of the pod's streamed requests still
  // waiting for a first token is (PodFirstTokenWaits): lateness no completed request shows yet.
  double ttft_late_ms = 0;
  // How much the pool's bounds must be scaled to hold 9 times in 10 on its latest requests
  // (BoundCoverage): what an SLO check multiplies a bound by. 1 = no evidence yet.
  double ttft_bound_factor = 1.0;
  double tpot_bound_factor = 1.0;
  // When the pod's forward passes end, from the token streams this EPP relays (PodStepClock);
  // absent until a step was measured.
  std::optional<StepTiming> step;

  // Attributes written by data producers; absent = the producer did not run or had no data,
  // whose meaning each consumer documents (e.g. no prefix info -> score 0).
  std::optional<PrefixCacheMatchInfo> prefix;
  std::optional<LatencyPredictionInfo> latency;

  // The pool this pod belongs to: label `pool`, "" (the default pool) when unlabelled.
  // References (valid while the labels are): both are read per pod on every request.
  const std::string& pool() const { return label("pool"); }
  const std::string& role() const { return label("role"); }
  const std::string& label(const std::string& key) const {
    static const std::string kNone;
    auto it = labels.find(key);
    return it == labels.end() ? kNone : it->second;
  }
};

}  // namespace llmd::epp
