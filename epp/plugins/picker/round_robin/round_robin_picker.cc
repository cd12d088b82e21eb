#include "epp/plugins/picker/round_robin/round_robin_picker.h"

namespace llmd::epp {

PluginOrError RoundRobinPicker::create(const std::string& name, const nlohmann::json& params,
                                       const Handle&) {
  if (auto e = ParamReader(params).finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<RoundRobinPicker>(name), {}};
}

std::size_t RoundRobinPicker::pick(CycleContext&, std::span<const ScoredEndpoint> scored) const {
  return static_cast<std::size_t>(next_.fetch_add(1, std::memory_order_relaxed) % scored.size());
}

}  // namespace llmd::epp
