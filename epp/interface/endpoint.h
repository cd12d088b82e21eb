#pragma once
// What the scheduler knows about one candidate pod during one scheduling cycle. Two parts:
// - PodInfo: what the pool knew of the pod when it was last published (address, labels, the
//   latest scrape). Immutable and shared: a cycle, a request and the pool snapshot all point
//   at the same object, so taking candidates copies a pointer per pod, never strings or maps.
// - Endpoint: the cycle's view of one candidate: that pointer, the EPP's in-flight counts and
//   learned factors as read when the candidates were taken, and the typed attributes the data
//   producers attach. Plain data, owned by the cycle that made it; copies are cheap.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
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

class PodLive;  // epp/datastore/pod_live.h

// Immutable once shared (PodInfoConstPtr): a change (a scrape, a reload) makes a new one.
struct PodInfo {
  std::string name;                           // pod name from the pool config
  std::string address;                        // "ip:port"
  std::map<std::string, std::string> labels;  // e.g. role: prefill|decode, class: h100
  PodMetrics metrics;
  // The pod's live bookkeeping in the PodRegistry that published this (in-flight counts, step
  // clock, residuals): what a request dispatched there books on, even after the pod left the
  // pool. Null for an endpoint made outside a registry (an upstream URL target, tests).
  std::shared_ptr<PodLive> live;
  // The label holding the pod's role (the pipeline's endpointRoleLabel; "" = no roles).
  std::string role_label = "role";

  // The pool this pod belongs to: label `pool`, "" (the default pool) when unlabelled.
  const std::string& pool() const { return label("pool"); }
  // prefill | decode | "" (feature pod_type, TPOT neutralisation).
  const std::string& role() const { return label(role_label); }
  const std::string& label(const std::string& key) const {
    static const std::string kNone;
    auto it = labels.find(key);
    return it == labels.end() ? kNone : it->second;
  }
};
using PodInfoConstPtr = std::shared_ptr<const PodInfo>;

struct Endpoint {
  Endpoint() : info(empty_info()) {}
  explicit Endpoint(PodInfoConstPtr pod) : info(std::move(pod)) {}
  // An endpoint over a pod no registry tracks (an upstream URL target, tests).
  static Endpoint of(PodInfo pod) {
    return Endpoint(std::make_shared<const PodInfo>(std::move(pod)));
  }

  PodInfoConstPtr info;  // never null

  const std::string& name() const { return info->name; }
  const std::string& address() const { return info->address; }
  const std::map<std::string, std::string>& labels() const { return info->labels; }
  const PodMetrics& metrics() const { return info->metrics; }
  // References into the shared PodInfo: read per pod on every request.
  const std::string& pool() const { return info->pool(); }
  const std::string& role() const { return info->role(); }
  const std::string& label(const std::string& key) const { return info->label(key); }

  // Read from the pod's PodLive (plus the peers' reports) when the candidates were taken, once
  // per cycle: every plugin of the cycle sees the same values.
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

 private:
  static const PodInfoConstPtr& empty_info() {
    static const PodInfoConstPtr kEmpty = std::make_shared<const PodInfo>();
    return kEmpty;
  }
};

}  // namespace llmd::epp
