#include "epp/plugins/filter/prefix_cache_affinity/prefix_cache_affinity_filter.h"

#include <algorithm>
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
  if (ttftSource != "latencyPredictor" && ttftSource != "prefillThroughput") {
    return "parameter 'ttftSource' must be latencyPredictor or prefillThroughput, got '" +
           ttftSource + "'";
  }
  if (!(peakPrefillThroughput >= 0)) {
    return param_error("peakPrefillThroughput", peakPrefillThroughput, ">= 0");
  }
  if (throughput_ttft() && maxTTFTPenaltyMs > 0 && peakPrefillThroughput == 0) {
    return "parameter 'peakPrefillThroughput' must be > 0 when ttftSource is prefillThroughput";
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
      .get("queueEscape", c.queueEscape)
      .get("ttftSource", c.ttftSource)
      .get("peakPrefillThroughput", c.peakPrefillThroughput);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (auto e = c.validate(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<PrefixCacheAffinityFilter>(name, std::move(c)), {}};
}

PrefixCacheAffinityFilter::PrefixCacheAffinityFilter(std::string name, Config config)
    : PluginBase(kType, std::move(name)), config_(std::move(config)) {}

std::optional<double> PrefixCacheAffinityFilter::ttft_ms(const Endpoint& e) const {
  if (config_.throughput_ttft()) {
    // llm-d: TTFT_ms = in-flight tokens / peak prefill throughput x 1000 (no load: 0).
    return config_.peakPrefillThroughput > 0
               ? static_cast<double>(std::max<int64_t>(0, e.prefill_tokens_in_flight)) /
                     config_.peakPrefillThroughput * 1000.0
               : 0.0;
  }
  if (e.latency) {
    return e.latency->predicted_ttft_ms;
  }
  return std::nullopt;
}

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
    if (auto ttft = ttft_ms(e)) {
      auto& best = is_sticky[i] ? best_sticky : best_other;
      if (!best || *ttft < *best) {
        best = ttft;
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
