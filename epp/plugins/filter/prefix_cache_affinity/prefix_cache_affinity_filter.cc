#include "epp/plugins/filter/prefix_cache_affinity/prefix_cache_affinity_filter.h"

#include <optional>

#include "epp/interface/rng.h"

namespace llmd::epp {

std::string PrefixCacheAffinityFilter::Config::validate() const {
  if (!(threshold >= 0 && threshold <= 1)) {
    return param_error("threshold", threshold, "in [0, 1]");
  }
  if (!(explorationProbability >= 0 && explorationProbability <= 1)) {
    return param_error("explorationProbability", explorationProbability, "in [0, 1]");
  }
  if (!(maxTTFTPenaltyMs >= 0)) {
    return param_error("maxTTFTPenaltyMs", maxTTFTPenaltyMs, ">= 0");
  }
  return {};
}

PluginOrError PrefixCacheAffinityFilter::create(const std::string& name,
                                                const nlohmann::json& params, const Handle&) {
  Config c;
  ParamReader r(params);
  r.get("threshold", c.threshold, "affinityThreshold")  // llm-d's spelling is accepted
      .get("explorationProbability", c.explorationProbability)
      .get("maxTTFTPenaltyMs", c.maxTTFTPenaltyMs)
      .get("queueEscape", c.queueEscape);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (auto e = c.validate(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<PrefixCacheAffinityFilter>(name, c), {}};
}

PrefixCacheAffinityFilter::PrefixCacheAffinityFilter(std::string name, Config config)
    : PluginBase(kType, std::move(name)), config_(config) {}

std::vector<Endpoint> PrefixCacheAffinityFilter::filter(CycleContext& ctx,
                                                        std::vector<Endpoint> endpoints) const {
  if (endpoints.size() <= 1 || config_.threshold <= 0) {
    return endpoints;
  }
  // Draw only when exploring is possible, so probability 0 leaves the Rng stream untouched.
  if (config_.explorationProbability > 0 && ctx.rng.uniform() < config_.explorationProbability) {
    return endpoints;
  }
  std::vector<bool> is_sticky(endpoints.size());
  std::optional<double> best_sticky, best_other;
  bool any_sticky = false, any_other = false;
  bool sticky_all_queued = true, other_idle_queue = false;
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    const auto& e = endpoints[i];
    is_sticky[i] = (e.prefix ? e.prefix->score() : 0.0) >= config_.threshold;  // none -> 0
    (is_sticky[i] ? any_sticky : any_other) = true;
    if (is_sticky[i]) {
      sticky_all_queued = sticky_all_queued && e.metrics().waiting > 0;
    } else {
      other_idle_queue = other_idle_queue || e.metrics().waiting <= 0;
    }
    if (e.latency) {
      auto& best = is_sticky[i] ? best_sticky : best_other;
      if (!best || e.latency->predicted_ttft_ms < *best) {
        best = e.latency->predicted_ttft_ms;
      }
    }
  }
  if (!any_sticky || !any_other) {
    return endpoints;  // nobody (or everybody) holds the prefix: nothing to narrow
  }
  // Without predictions the penalty cannot be judged and stickiness stays (the composite
  // fallback values prefix hits too); the reference keeps all pods in that case.
  if (config_.maxTTFTPenaltyMs > 0 && best_sticky && best_other &&
      *best_sticky - *best_other > config_.maxTTFTPenaltyMs) {
    return endpoints;
  }
  if (config_.queueEscape && sticky_all_queued && other_idle_queue) {
    return endpoints;
  }
  std::vector<Endpoint> sticky;
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    if (is_sticky[i]) {
      sticky.push_back(std::move(endpoints[i]));
    }
  }
  return sticky;
}

}  // namespace llmd::epp
