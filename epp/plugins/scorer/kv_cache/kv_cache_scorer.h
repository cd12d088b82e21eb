#pragma once
// kv-cache-scorer: free KV cache, 1 - kv_cache_usage, clamped to [0,1]. Also registered under
// llm-d's name kv-cache-utilization-scorer.
// Stateless and immutable; no parameters.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class KvCacheScorer final : public PluginBase<Scorer> {
 public:
  static constexpr std::string_view kType = "kv-cache-scorer";

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  explicit KvCacheScorer(std::string name) : PluginBase(kType, std::move(name)) {}

  // Scorer
  std::vector<double> score(CycleContext& ctx, std::span<const Endpoint> endpoints) const override;
};

}  // namespace llmd::epp
