#include "epp/plugins/picker/near_best_rotation/near_best_rotation_picker.h"

#include <algorithm>
#include <cmath>

#include "epp/interface/rng.h"

namespace llmd::epp {

std::string NearBestRotationPicker::Config::validate() const {
  if (!(tolerance >= 0 && tolerance <= 1)) {
    return param_error("tolerance", tolerance, ">= 0 and <= 1");
  }
  return {};
}

PluginOrError NearBestRotationPicker::create(const std::string& name,
                                             const nlohmann::json& params, const Handle&) {
  Config c;
  ParamReader r(params);
  r.get("tolerance", c.tolerance);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (auto e = c.validate(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<NearBestRotationPicker>(name, c), {}};
}

std::size_t NearBestRotationPicker::pick(CycleContext& ctx,
                                         std::span<const ScoredEndpoint> scored) const {
  double best = -1;
  for (const auto& s : scored) {
    if (std::isfinite(s.score)) {
      best = std::max(best, s.score);
    }
  }
  // A score of 0 means "do not pick while another pod has weight"; with every score 0 (or
  // none finite) all pods are equally near.
  const double floor = best > 0 ? (1.0 - config_.tolerance) * best : -1;

  std::lock_guard lock(mu_);
  std::size_t chosen = scored.size(), ties = 0;
  uint64_t chosen_seq = 0;
  for (std::size_t i = 0; i < scored.size(); ++i) {
    const double score = scored[i].score;
    if (best > 0 && !(score >= floor && score > 0)) {
      continue;
    }
    auto it = last_pick_.find(scored[i].endpoint->name);
    const uint64_t seq = it == last_pick_.end() ? 0 : it->second;
    if (chosen == scored.size() || seq < chosen_seq) {
      chosen = i, chosen_seq = seq, ties = 1;
    } else if (seq == chosen_seq) {
      // Reservoir sampling among pods picked equally long ago (only the never-picked tie).
      ++ties;
      if (ctx.rng.uniform() * static_cast<double>(ties) < 1.0) {
        chosen = i;
      }
    }
  }
  if (chosen == scored.size()) {
    chosen = 0;  // unreachable: the best-scored pod is always near-best
  }
  if (last_pick_.size() >= kMaxTrackedPods &&
      !last_pick_.contains(scored[chosen].endpoint->name)) {
    last_pick_.clear();
  }
  last_pick_[scored[chosen].endpoint->name] = ++picks_;
  return chosen;
}

}  // namespace llmd::epp
