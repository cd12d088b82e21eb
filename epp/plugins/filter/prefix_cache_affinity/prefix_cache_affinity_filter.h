#pragma once
// prefix-cache-affinity-filter: narrows candidates to "sticky" pods whose prefix-cache score is
// at least `threshold`, unless exploring, the sticky pods are much slower to a first token
// (predicted, or estimated from the prompt tokens in flight), or (with
// queueEscape, the default) every sticky pod has a queue and another pod has none. Used twice in
// the default profile (strict 0.99, then loose 0.70).
// Stateless and immutable; randomness comes from the cycle's Rng.
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class PrefixCacheAffinityFilter final : public PluginBase<Filter> {
 public:
  static constexpr std::string_view kType = "prefix-cache-affinity-filter";

  struct Config {
    double threshold = 0.80;               // [0, 1]; <= 0 disables the filter
    double explorationProbability = 0.01;  // [0, 1]: chance to skip the gate and keep all
    // >= 0; 0 = never break stickiness on predictions (upstream: 5000). A model trained below
    // a pod's slot limit cannot predict a slot queue, so the break fired late or at random;
    // queueEscape reads the queue itself.
    double maxTTFTPenaltyMs = 0;
    // Ours: keep every pod when each sticky pod has requests waiting (scraped) and some other
    // pod has none. A waiting request queues for a batch slot or KV blocks, not for prefill
    // compute: its cache hit saves prefill it would not yet be doing. Upstream: false.
    bool queueEscape = true;
    // Where the TTFT penalty reads each pod's TTFT (llm-d's ttftSource): "latencyPredictor", the
    // predicted TTFT (ours and GIE's only choice), or "prefillThroughput", estimated as the
    // pod's uncached prompt tokens in flight / peakPrefillThroughput (llm-d's default).
    std::string ttftSource = "latencyPredictor";
    double peakPrefillThroughput = 15928;  // tokens/s, >= 0 (llm-d's default: Qwen 32B, 2xH100)
    std::string validate() const;
    bool throughput_ttft() const { return ttftSource == "prefillThroughput"; }
  };

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  PrefixCacheAffinityFilter(std::string name, Config config);

  // Filter
  std::vector<Endpoint> filter(CycleContext& ctx, std::vector<Endpoint> endpoints) const override;
  std::vector<AttributeKey> consumes() const override {
    if (config_.throughput_ttft()) {
      return {AttributeKey::kPrefixCacheMatch};
    }
    return {AttributeKey::kPrefixCacheMatch, AttributeKey::kLatencyPrediction};
  }

  const Config& config() const { return config_; }

 private:
  // The TTFT the penalty compares (ttftSource); nullopt without a prediction.
  std::optional<double> ttft_ms(const Endpoint& e) const;

  Config config_;
};

}  // namespace llmd::epp
