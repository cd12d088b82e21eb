#include "epp/plugins/picker/max_score/max_score_picker.h"

#include "epp/interface/rng.h"
#include "epp/plugins/picker/picker_params.h"

namespace llmd::epp {

PluginOrError MaxScorePicker::create(const std::string& name, const nlohmann::json& params,
                                     const Handle&) {
  ParamReader r(params);
  const std::string refused = read_max_num_of_endpoints(r);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (!refused.empty()) {
    return PluginOrError::fail(refused);
  }
  return {std::make_shared<MaxScorePicker>(name), {}};
}

std::size_t MaxScorePicker::pick(CycleContext& ctx, std::span<const ScoredEndpoint> scored) const {
  std::size_t best = 0, ties = 0;
  for (std::size_t i = 0; i < scored.size(); ++i) {
    if (ties == 0 || scored[i].score > scored[best].score) {
      best = i;
      ties = 1;
    } else if (scored[i].score == scored[best].score) {
      // Reservoir sampling over the tied pods: each ends up chosen with probability 1/ties.
      ++ties;
      if (ctx.rng.uniform() * static_cast<double>(ties) < 1.0) {
        best = i;
      }
    }
  }
  return best;
}

}  // namespace llmd::epp
