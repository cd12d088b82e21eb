#include "epp/plugins/scorer/prefix_cache/prefix_cache_scorer.h"

namespace llmd::epp {

PluginOrError PrefixCacheScorer::create(const std::string& name, const nlohmann::json& params,
                                        const Handle&) {
  if (auto e = ParamReader(params).finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<PrefixCacheScorer>(name), {}};
}

std::vector<double> PrefixCacheScorer::score(CycleContext&,
                                             std::span<const Endpoint> endpoints) const {
  std::vector<double> out;
  out.reserve(endpoints.size());
  for (const auto& e : endpoints) {
    out.push_back(e.prefix ? e.prefix->score() : 0.0);
  }
  return out;
}

}  // namespace llmd::epp
