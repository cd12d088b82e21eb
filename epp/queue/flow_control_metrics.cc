#include "epp/queue/flow_control_metrics.h"

#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "epp/queue/admission_gate.h"

namespace llmd::epp {
namespace {

constexpr const char* kFairnessId = "default-flow";  // GIE's metadata.DefaultFairnessID

// GIE v1.5.0's buckets.
const prometheus::Histogram::BucketBoundaries kQueueSeconds = {
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25,   0.5,    1.0,   2.5,   5.0,  10.0,  30.0, 60.0};
const prometheus::Histogram::BucketBoundaries kCycleSeconds = {0.0001, 0.0002, 0.0005, 0.001, 0.002,
                                                               0.005,  0.01,   0.02,   0.05,  0.1};

}  // namespace

FlowControlMetrics::FlowControlMetrics(prometheus::Registry& r, PoolName pool_name,
                                       ModelLabel model_label)
    : pool_name_(std::move(pool_name)),
      model_label_(std::move(model_label)),
      size_(prometheus::BuildGauge()
                .Name("inference_extension_flow_control_queue_size")
                .Help("[ALPHA] Current number of requests actively held in the Flow Control "
                      "queue (our router queue).")
                .Register(r)),
      bytes_(prometheus::BuildGauge()
                 .Name("inference_extension_flow_control_queue_bytes")
                 .Help("[ALPHA] Current total size in bytes of requests actively held in the "
                       "Flow Control queue (our router queue).")
                 .Register(r)),
      queue_duration_(prometheus::BuildHistogram()
                          .Name("inference_extension_flow_control_request_queue_duration_seconds")
                          .Help("[ALPHA] Distribution of total time requests spend in the Flow "
                                "Control layer (from enqueue to final outcome).")
                          .Register(r)),
      enqueue_duration_(
          prometheus::BuildHistogram()
              .Name("inference_extension_flow_control_request_enqueue_duration_seconds")
              .Help("[ALPHA] Distribution of time taken to enqueue requests into the Flow "
                    "Control layer.")
              .Register(r)),
      dispatch_cycle_(prometheus::BuildHistogram()
                          .Name("inference_extension_flow_control_dispatch_cycle_duration_seconds")
                          .Help("[ALPHA] Distribution of time taken for each internal dispatch "
                                "cycle in the Flow Control layer (one drain of a queue).")
                          .Register(r)
                          .Add({}, kCycleSeconds)) {}

FlowControlMetrics::Flow FlowControlMetrics::enter(const AdmissionRequest& request) {
  Flow f;
  f.priority = std::to_string(request.priority);
  f.pool = pool_name_(request.pool);
  f.model = model_label_(request.model);
  f.target_model =
      model_label_(request.target_model.empty() ? request.model : request.target_model);
  f.bytes = static_cast<double>(request.body_bytes);
  const prometheus::Labels l{{"fairness_id", kFairnessId},
                             {"priority", f.priority},
                             {"inference_pool", f.pool},
                             {"model_name", f.model},
                             {"target_model_name", f.target_model}};
  f.size = &size_.Add(l);
  f.bytes_held = &bytes_.Add(l);
  f.size->Increment();
  f.bytes_held->Increment(f.bytes);
  return f;
}

void FlowControlMetrics::leave(const Flow& f, const char* outcome, double seconds) {
  if (f.size == nullptr) {
    return;
  }
  f.size->Decrement();
  f.bytes_held->Decrement(f.bytes);
  queue_duration_
      .Add({{"fairness_id", kFairnessId},
            {"priority", f.priority},
            {"outcome", outcome},
            {"inference_pool", f.pool},
            {"model_name", f.model},
            {"target_model_name", f.target_model}},
           kQueueSeconds)
      .Observe(seconds);
}

void FlowControlMetrics::enqueued(const Flow& f, const char* outcome, double seconds) {
  enqueue_duration_
      .Add({{"fairness_id", kFairnessId}, {"priority", f.priority}, {"outcome", outcome}},
           kCycleSeconds)
      .Observe(seconds);
}

void FlowControlMetrics::dispatch_cycle(double seconds) {
  dispatch_cycle_.Observe(seconds);
}

}  // namespace llmd::epp
