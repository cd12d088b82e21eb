#pragma once
// weighted-random-picker: picks a candidate with probability score / sum of scores, by A-Res
// (key_i = U_i^(1/score_i), largest key wins); all scores zero -> uniform. Stateless; randomness
// from the cycle's Rng.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class WeightedRandomPicker final : public PluginBase<Picker> {
 public:
  static constexpr std::string_view kType = "weighted-random-picker";

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  explicit WeightedRandomPicker(std::string name) : PluginBase(kType, std::move(name)) {}

  // Picker
  std::size_t pick(CycleContext& ctx, std::span<const ScoredEndpoint> scored) const override;
};

}  // namespace llmd::epp
