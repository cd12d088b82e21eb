#pragma once
// max-score-picker: picks the highest score; ties are broken uniformly at random with the
// cycle's Rng. Stateless and immutable.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class MaxScorePicker final : public PluginBase<Picker> {
 public:
  static constexpr std::string_view kType = "max-score-picker";

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  explicit MaxScorePicker(std::string name) : PluginBase(kType, std::move(name)) {}

  // Picker
  std::size_t pick(CycleContext& ctx, std::span<const ScoredEndpoint> scored) const override;
};

}  // namespace llmd::epp
