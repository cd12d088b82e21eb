#pragma once
// prefix-cache-scorer: the share of the prompt's leading blocks the pod is believed to hold
// (PrefixCacheMatchInfo); 0 without prefix information.
// Stateless and immutable; no parameters.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class PrefixCacheScorer final : public PluginBase<Scorer> {
 public:
  static constexpr std::string_view kType = "prefix-cache-scorer";

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  explicit PrefixCacheScorer(std::string name) : PluginBase(kType, std::move(name)) {}

  // Scorer
  std::vector<double> score(CycleContext& ctx, std::span<const Endpoint> endpoints) const override;
  std::vector<AttributeKey> consumes() const override { return {AttributeKey::kPrefixCacheMatch}; }
};

}  // namespace llmd::epp
