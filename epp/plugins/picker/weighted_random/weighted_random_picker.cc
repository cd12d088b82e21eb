#include "epp/plugins/picker/weighted_random/weighted_random_picker.h"

#include <algorithm>
#include <cmath>

#include "epp/interface/rng.h"

namespace llmd::epp {

PluginOrError WeightedRandomPicker::create(const std::string& name, const nlohmann::json& params,
                                           const Handle&) {
  if (auto e = ParamReader(params).finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<WeightedRandomPicker>(name), {}};
}

std::size_t WeightedRandomPicker::pick(CycleContext& ctx,
                                       std::span<const ScoredEndpoint> scored) const {
  bool any_positive = std::any_of(scored.begin(), scored.end(),
                                  [](const ScoredEndpoint& s) { return s.score > 0; });
  if (!any_positive) {
    auto i = static_cast<std::size_t>(ctx.rng.uniform() * static_cast<double>(scored.size()));
    return std::min(i, scored.size() - 1);
  }
  std::size_t best = 0;
  double best_key = -1;
  for (std::size_t i = 0; i < scored.size(); ++i) {
    if (!(scored[i].score > 0)) {
      continue;  // zero (or NaN) weight is never picked while another pod has weight
    }
    double u = ctx.rng.uniform();
    if (u <= 0) {
      u = 1e-10;  // keep the key positive so a positive weight always beats key -1
    }
    double key = std::pow(u, 1.0 / scored[i].score);
    if (key > best_key) {
      best_key = key;
      best = i;
    }
  }
  return best;
}

}  // namespace llmd::epp
