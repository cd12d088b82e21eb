#pragma once
// predicted-latency-producer: asks the PredictionSource (the coalescing predictor client, a fake
// in tests, the in-process model in the simulator) for TTFT/TPOT of the request on every
// candidate and writes LatencyPredictionInfo. It blocks the scheduling thread at most until
// now + predictionDeadlineMs. Immutable after creation; the source is thread-safe.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/features/schema.h"
#include "epp/interface/prediction_source.h"
#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class PredictedLatencyProducer final : public PluginBase<DataProducer> {
 public:
  static constexpr std::string_view kType = "predicted-latency-producer";

  struct Config {
    double predictionDeadlineMs = 50;  // > 0: longest wait for predictions per request
    // false: the pool is trained without TPOT samples (non-streaming mode), so TPOT is
    // neutralised for every request, as it always is for non-streaming requests.
    bool streamingMode = true;
    std::string validate() const;
  };

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  PredictedLatencyProducer(std::string name, Config config, PredictionSource* source,
                           Handle::Now now);

  // DataProducer
  void produce(CycleContext& ctx, std::vector<Endpoint>& endpoints) const override;
  std::vector<AttributeKey> produces() const override { return {AttributeKey::kLatencyPrediction}; }
  std::vector<AttributeKey> consumes() const override { return {AttributeKey::kPrefixCacheMatch}; }

  // Headroom and validity of one prediction under the request's SLOs (spec section 2 step 2).
  LatencyPredictionInfo info_for(const SchedulingRequest& request, const Endpoint& e,
                                 const Prediction& p) const;

  const Config& config() const { return config_; }

 private:
  Config config_;
  PredictionSource* source_;  // may be null: never predicts
  Handle::Now now_;
};

}  // namespace llmd::epp
