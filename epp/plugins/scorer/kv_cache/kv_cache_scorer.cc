#include "epp/plugins/scorer/kv_cache/kv_cache_scorer.h"

#include <algorithm>

namespace llmd::epp {

PluginOrError KvCacheScorer::create(const std::string& name, const nlohmann::json& params,
                                    const Handle&) {
  if (auto e = ParamReader(params).finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<KvCacheScorer>(name), {}};
}

std::vector<double> KvCacheScorer::score(CycleContext&, std::span<const Endpoint> endpoints) const {
  std::vector<double> out;
  out.reserve(endpoints.size());
  for (const auto& e : endpoints) {
    out.push_back(std::clamp(1.0 - e.metrics().kv_cache_usage, 0.0, 1.0));
  }
  return out;
}

}  // namespace llmd::epp
