#include "epp/plugins/scorer/queue/queue_scorer.h"

#include <algorithm>

namespace llmd::epp {

PluginOrError QueueScorer::create(const std::string& name, const nlohmann::json& params,
                                  const Handle&) {
  if (auto e = ParamReader(params).finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<QueueScorer>(name), {}};
}

std::vector<double> QueueScorer::score(CycleContext&, std::span<const Endpoint> endpoints) const {
  std::vector<double> out(endpoints.size(), 1.0);
  if (endpoints.empty()) {
    return out;
  }
  auto [lo, hi] = std::minmax_element(endpoints.begin(), endpoints.end(), [](auto& a, auto& b) {
    return a.metrics().waiting < b.metrics().waiting;
  });
  int64_t min_q = lo->metrics().waiting, max_q = hi->metrics().waiting;
  if (max_q == min_q) {
    return out;  // no pod is better than another on this signal
  }
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    out[i] = static_cast<double>(max_q - endpoints[i].metrics().waiting) / (max_q - min_q);
  }
  return out;
}

}  // namespace llmd::epp
