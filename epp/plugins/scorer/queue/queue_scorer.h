#pragma once
// queue-scorer: fewer waiting requests score higher, min-max normalised over the candidates to
// [0,1] (all equal -> 1).
// Stateless and immutable; no parameters.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class QueueScorer final : public PluginBase<Scorer> {
 public:
  static constexpr std::string_view kType = "queue-scorer";

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  explicit QueueScorer(std::string name) : PluginBase(kType, std::move(name)) {}

  // Scorer
  std::vector<double> score(CycleContext& ctx, std::span<const Endpoint> endpoints) const override;
};

}  // namespace llmd::epp
