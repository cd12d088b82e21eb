#include "epp/plugins/picker/weighted_random/weighted_random_picker.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "epp/interface/rng.h"
#include "epp/plugins/picker/picker_params.h"

namespace llmd::epp {

std::string WeightedRandomPicker::Config::validate() const {
  if (!(scoreExponent > 0 && scoreExponent <= 100)) {
    return param_error("scoreExponent", scoreExponent, "> 0 and <= 100");
  }
  return {};
}

PluginOrError WeightedRandomPicker::create(const std::string& name, const nlohmann::json& params,
                                           const Handle&) {
  Config c;
  ParamReader r(params);
  r.get("scoreExponent", c.scoreExponent);
  const std::string refused = read_max_num_of_endpoints(r);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (!refused.empty()) {
    return PluginOrError::fail(refused);
  }
  if (auto e = c.validate(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<WeightedRandomPicker>(name, c), {}};
}

std::size_t pick_weighted(CycleContext& ctx, std::span<const ScoredEndpoint> scored,
                          double exponent) {
  bool any_positive = std::any_of(scored.begin(), scored.end(),
                                  [](const ScoredEndpoint& s) { return s.score > 0; });
  if (!any_positive) {
    auto i = static_cast<std::size_t>(ctx.rng.uniform() * static_cast<double>(scored.size()));
    return std::min(i, scored.size() - 1);
  }
  // A-Res keys U^(1/w), w = score^k, compared through log(-log U) - k log(score) (smaller
  // wins): the same order, without underflow of score^k for large k.
  std::size_t best = scored.size();
  double best_key = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < scored.size(); ++i) {
    if (!(scored[i].score > 0)) {
      continue;  // zero (or NaN) weight is never picked while another pod has weight
    }
    double u = ctx.rng.uniform();
    u = std::clamp(u, 1e-300, 1.0 - 1e-16);  // -log(u) stays positive and finite
    double key = std::log(-std::log(u)) - exponent * std::log(scored[i].score);
    if (best == scored.size() || key < best_key) {
      best_key = key;
      best = i;
    }
  }
  return best;
}

std::size_t WeightedRandomPicker::pick(CycleContext& ctx,
                                       std::span<const ScoredEndpoint> scored) const {
  return pick_weighted(ctx, scored, config_.scoreExponent);
}

}  // namespace llmd::epp
