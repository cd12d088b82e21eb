#pragma once
// The Gateway API Inference Extension's (GIE v1.5.0) flow-control families, fed by our router
// queue (AdmissionGate), its equivalent: requests wait in the EPP while the pool is saturated
// and leave best first, or are refused. Recorded only while the router queue is configured
// (GIE records them only with its flow-control layer on):
//   inference_extension_flow_control_queue_size / _queue_bytes{fairness_id, priority,
//     inference_pool, model_name, target_model_name}: requests (and their body bytes) inside
//     the gate: from enter() until admitted or refused (an immediate admission is in and out)
//   inference_extension_flow_control_request_queue_duration_seconds{fairness_id, priority,
//     outcome, inference_pool, model_name, target_model_name}: enter() to the final outcome
//   inference_extension_flow_control_request_enqueue_duration_seconds{fairness_id, priority,
//     outcome}: the enter() call itself (outcome NotYetFinalized when the request then waits)
//   inference_extension_flow_control_dispatch_cycle_duration_seconds: one drain of a queue
// fairness_id is always GIE's default, "default-flow": our queue has no per-tenant flows.
// priority is the request's soft priority (the objective's), GIE's priority band.
//
// Thread-safe (prometheus-cpp metrics are; the label function must be).
#include <functional>
#include <string>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace llmd::epp {

struct AdmissionRequest;

class FlowControlMetrics {
 public:
  // GIE's inference_pool of one of our pools (the pods' `pool` label, "" = the default pool).
  using PoolName = std::function<std::string(const std::string& pool)>;
  // The bounded model_name label of a model (ModelLabels).
  using ModelLabel = std::function<std::string(const std::string& model)>;
  FlowControlMetrics(prometheus::Registry& registry, PoolName pool_name, ModelLabel model_label);

  // GIE's outcome names (its QueueOutcome strings).
  static constexpr const char* kDispatched = "Dispatched";
  static constexpr const char* kNotYetFinalized = "NotYetFinalized";
  static constexpr const char* kRejectedCapacity = "RejectedCapacity";
  static constexpr const char* kRejectedOther = "RejectedOther";
  static constexpr const char* kEvictedTtl = "EvictedTTL";
  static constexpr const char* kEvictedCancelled = "EvictedContextCancelled";
  static constexpr const char* kEvictedOther = "EvictedOther";

  // One request inside the gate: its series, found when it enters.
  struct Flow {
    std::string priority;
    std::string pool, model, target_model;  // label values
    double bytes = 0;
    prometheus::Gauge* size = nullptr;
    prometheus::Gauge* bytes_held = nullptr;
  };
  Flow enter(const AdmissionRequest& request);  // counts it in the queue
  // The request's final outcome, `seconds` after it entered; it leaves the queue.
  void leave(const Flow& flow, const char* outcome, double seconds);
  // The enter() call took `seconds` and ended in `outcome`.
  void enqueued(const Flow& flow, const char* outcome, double seconds);
  void dispatch_cycle(double seconds);

 private:
  PoolName pool_name_;
  ModelLabel model_label_;
  prometheus::Family<prometheus::Gauge>& size_;
  prometheus::Family<prometheus::Gauge>& bytes_;
  prometheus::Family<prometheus::Histogram>& queue_duration_;
  prometheus::Family<prometheus::Histogram>& enqueue_duration_;
  prometheus::Histogram& dispatch_cycle_;
};

}  // namespace llmd::epp
