#include "epp/plugins/admitter/latency_slo/latency_slo_admitter.h"

namespace llmd::epp {

std::string LatencySloAdmitter::Config::validate() const {
  if (!(coldKvCacheThreshold >= 0 && coldKvCacheThreshold <= 1)) {
    return param_error("coldKvCacheThreshold", coldKvCacheThreshold, "in [0, 1]");
  }
  return {};
}

PluginOrError LatencySloAdmitter::create(const std::string& name, const nlohmann::json& params,
                                         const Handle&) {
  Config c;
  ParamReader r(params);
  r.get("coldKvCacheThreshold", c.coldKvCacheThreshold);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (auto e = c.validate(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<LatencySloAdmitter>(name, c), {}};
}

LatencySloAdmitter::LatencySloAdmitter(std::string name, Config config)
    : PluginBase(kType, std::move(name)), config_(config) {}

AdmitDecision LatencySloAdmitter::admit(CycleContext& ctx,
                                        std::span<const Endpoint> endpoints) const {
  if (!ctx.request.sheddable() || !ctx.request.has_slo()) {
    return {};
  }
  bool has_prediction = false, has_valid = false, has_idle = false, has_cold = false;
  for (const auto& e : endpoints) {
    has_cold |= e.metrics().kv_cache_usage < config_.coldKvCacheThreshold;
    has_idle |= e.dispatched == 0;  // our exact count, not the lagging scraped gauge
    if (e.latency) {
      has_prediction = true;
      has_valid |= e.latency->both_valid();
    }
  }
  // Fail open without predictions: we cannot know the request would miss its SLO.
  if (!has_prediction || has_valid || has_idle || has_cold) {
    return {};
  }
  return {false, 429,
          "sheddable request: no endpoint is predicted to meet its latency SLO and none is idle"};
}

}  // namespace llmd::epp
