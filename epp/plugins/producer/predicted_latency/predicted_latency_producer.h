#pragma once
// predicted-latency-producer: asks the PredictionSource (the coalescing predictor client, a fake
// in tests, the in-process model in the simulator) for TTFT/TPOT of the request on every
// candidate and writes LatencyPredictionInfo by now + predictionDeadlineMs. In the EPP it asks
// without blocking (produce_async: the cycle resumes when the answer or the deadline comes);
// produce() blocks, for callers without an event loop. Immutable after creation; the source
// is thread-safe.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/features/schema.h"
#include "epp/scheduler/config_plugins.h"
#include "epp/interface/prediction_source.h"
#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class PredictedLatencyProducer final : public PluginBase<DataProducer>, public EndpointRoleLabel {
 public:
  static constexpr std::string_view kType = "predicted-latency-producer";

  struct Config {
    double predictionDeadlineMs = 50;  // > 0: longest wait for predictions per request
    // How the pool is trained, as upstream defines it: false (upstream's default), TTFT :=
    // the end-to-end latency of every request and no TPOT (TPOT is neutralised for every
    // request); true, TTFT at the first streamed chunk and TPOT from streams (non-streamed
    // requests then give no sample: llmd_epp_feedback_requests_not_sampled_total).
    bool streamingMode = false;
    // The three corrections below are ours and on by default (upstream-pipeline.yaml turns them
    // off); each is measured from this EPP's own requests and is a no-op until it has evidence.
    // Scale each pod's predicted TTFT and TPOT by its residual factors (PodResidual: how much
    // slower or faster than its pool's other pods it has been against the model).
    bool podResidualCorrection = true;
    // Shift each pod's predicted TTFT by its step phase (StepTiming, from the streams this EPP
    // relays): the rest of the forward pass in progress minus the half step the model's average
    // includes. Only for requests without SLO headers, on pods this EPP has requests running on
    // and nothing queued or prefilling, where that wait is the first token's largest unknown.
    bool stepPhaseCorrection = true;
    // SLO checks (headroom, validity) scale each bound by the factor that made the pool's
    // bounds hold 9 times in 10 on its latest requests (BoundCoverage); ranking is unchanged.
    bool sloBoundCalibration = true;
    // Add to each pod's predicted TTFT how far past its bound the pod's most overdue request
    // still waiting for a first token is (PodFirstTokenWaits): a queue running later than the
    // model predicted delays every request behind it, seconds before any completed request
    // shows it.
    bool lateFirstTokenCorrection = false;
    // Upstream's parameters (GIE v1.5.0, llm-d-router; README "Upstream parameters").
    // false (upstream's predictInProduce / predictInPrepareData): training only, no predictions
    // asked; every request is scheduled as with x-prediction-based-scheduling: false.
    bool predictInProduce = true;
    // > 0: the TPOT SLO a prediction is checked against is the request's times this factor.
    double sloBufferFactor = 1;
    // The pod label holding a pod's role, for the whole EPP (upstream's default "" = no roles;
    // ours: `role`, the label our pool configs use).
    std::string endpointRoleLabel = "role";
    // Accepted, no effect here (README): upstream's mid-stream TPOT sampling (> 0, >= 0; llm-d
    // removed it too) and its per-request context cache's TTL (>= 0; here a request's state
    // ends with the request).
    double samplingMean = 1000;
    int64_t maxDecodeTokenSamplesForPrediction = 0;
    std::chrono::nanoseconds contextTTL = std::chrono::minutes(5);
    std::string validate() const;
  };

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  PredictedLatencyProducer(std::string name, Config config, PredictionSource* source,
                           Handle::Now now);

  // DataProducer
  void produce(CycleContext& ctx, std::vector<Endpoint>& endpoints) const override;
  void produce_async(CycleContext& ctx, std::vector<Endpoint>& endpoints,
                     std::function<void()> done) const override;
  std::vector<AttributeKey> produces() const override { return {AttributeKey::kLatencyPrediction}; }
  std::vector<AttributeKey> consumes() const override { return {AttributeKey::kPrefixCacheMatch}; }
  std::optional<bool> training_streaming_mode() const override { return config_.streamingMode; }
  bool ignores_predictions() const override { return !config_.predictInProduce; }

  // EndpointRoleLabel
  const std::string& endpoint_role_label() const override { return config_.endpointRoleLabel; }

  // Headroom and validity of one prediction under the request's SLOs (spec section 2 step 2),
  // scaled by the pod's residual factors when podResidualCorrection is on, and the TTFT
  // shifted by `ttft_phase_ms` (step_phase_ms).
  LatencyPredictionInfo info_for(const SchedulingRequest& request, const Endpoint& e,
                                 const Prediction& p, double ttft_phase_ms = 0) const;
  // The step-phase delay for `request` sent to `e` at `now` (0 when off, unknown or not
  // applied).
  double step_phase_ms(const SchedulingRequest& request, const Endpoint& e,
                       std::chrono::steady_clock::time_point now) const;

  const Config& config() const { return config_; }

 private:
  // Empty when this request gets no predictions (no source, disabled, no candidates).
  std::vector<features::FeatureInput> rows_for(const CycleContext& ctx,
                                               const std::vector<Endpoint>& endpoints) const;
  std::chrono::steady_clock::time_point deadline() const;
  // `asked`: when the predictions were asked for (their duration is the attribute's
  // prediction_ms).
  void apply(const CycleContext& ctx, std::vector<Endpoint>& endpoints,
             const PredictionResult& predictions,
             std::chrono::steady_clock::time_point asked) const;

  Config config_;
  PredictionSource* source_;  // may be null: never predicts
  Handle::Now now_;
};

}  // namespace llmd::epp
