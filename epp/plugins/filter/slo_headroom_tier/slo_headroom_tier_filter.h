#pragma once
// slo-headroom-tier-filter: keeps the positive tier (both headrooms >= 0) and, with probability
// epsilonExploreNeg, the negative tier instead so overloaded pods still see some traffic and
// their predictions stay fresh. Stateless and immutable.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class SloHeadroomTierFilter final : public PluginBase<Filter> {
 public:
  static constexpr std::string_view kType = "slo-headroom-tier-filter";

  struct Config {
    double epsilonExploreNeg = 0.01;  // [0, 1]
    std::string validate() const;
  };

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  SloHeadroomTierFilter(std::string name, Config config);

  // Filter
  std::vector<Endpoint> filter(CycleContext& ctx, std::vector<Endpoint> endpoints) const override;
  std::vector<AttributeKey> consumes() const override { return {AttributeKey::kLatencyPrediction}; }

 private:
  Config config_;
};

}  // namespace llmd::epp
