#pragma once
// latency-slo-admitter: sheds sheddable requests (priority < 0) that carry an SLO when no pod
// can serve them in time. Stateless and immutable.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class LatencySloAdmitter final : public PluginBase<Admitter> {
 public:
  static constexpr std::string_view kType = "latency-slo-admitter";

  struct Config {
    // A pod whose KV usage is below this is "cold": its predictions are not trusted to deny.
    double coldKvCacheThreshold = 0.02;  // [0, 1]
    std::string validate() const;
  };

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  LatencySloAdmitter(std::string name, Config config);

  // Admitter
  AdmitDecision admit(CycleContext& ctx, std::span<const Endpoint> endpoints) const override;
  std::vector<AttributeKey> consumes() const override { return {AttributeKey::kLatencyPrediction}; }

 private:
  Config config_;
};

}  // namespace llmd::epp
