#include "epp/plugins/filter/slo_headroom_tier/slo_headroom_tier_filter.h"

#include "epp/interface/rng.h"

namespace llmd::epp {

std::string SloHeadroomTierFilter::Config::validate() const {
  if (!(epsilonExploreNeg >= 0 && epsilonExploreNeg <= 1)) {
    return param_error("epsilonExploreNeg", epsilonExploreNeg, "in [0, 1]");
  }
  return {};
}

PluginOrError SloHeadroomTierFilter::create(const std::string& name, const nlohmann::json& params,
                                            const Handle&) {
  Config c;
  ParamReader r(params);
  r.get("epsilonExploreNeg", c.epsilonExploreNeg);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (auto e = c.validate(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<SloHeadroomTierFilter>(name, c), {}};
}

SloHeadroomTierFilter::SloHeadroomTierFilter(std::string name, Config config)
    : PluginBase(kType, std::move(name)), config_(config) {}

std::vector<Endpoint> SloHeadroomTierFilter::filter(CycleContext& ctx,
                                                    std::vector<Endpoint> endpoints) const {
  if (endpoints.size() <= 1) {
    return endpoints;
  }
  std::vector<Endpoint> positive, negative;
  bool any_prediction = false;
  for (auto& e : endpoints) {
    // A pod without a prediction cannot be shown to meet the SLO: negative tier.
    bool pos = e.latency && e.latency->ttft_headroom_ms >= 0 && e.latency->tpot_headroom_ms >= 0;
    any_prediction |= e.latency.has_value();
    (pos ? positive : negative).push_back(std::move(e));
  }
  if (!any_prediction) {
    return negative;  // every pod, in order: nothing to split on (composite fallback)
  }
  if (positive.empty()) {
    return negative;
  }
  if (negative.empty()) {
    return positive;
  }
  if (config_.epsilonExploreNeg > 0 && ctx.rng.uniform() < config_.epsilonExploreNeg) {
    return negative;
  }
  return positive;
}

}  // namespace llmd::epp
