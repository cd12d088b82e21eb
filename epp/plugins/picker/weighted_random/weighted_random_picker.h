#pragma once
// weighted-random-picker: picks a candidate with probability score^k / sum of score^k, by A-Res
// (key_i = U_i^(1/score_i^k), largest key wins); all scores zero -> uniform. Stateless;
// randomness from the cycle's Rng.
//
// k = `scoreExponent`. Upstream's picker is k = 1: with scores linear in predicted latency, the
// best of ten pods then gets about a fifth of the picks and good predictions are diluted. A
// larger k concentrates on the best-scored pods while still spreading between near-equals,
// which keeps a burst of simultaneous decisions from herding onto one pod.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

// Index of a candidate drawn with probability score^exponent / sum (A-Res); all scores zero (or
// not finite) -> uniform. Shared by the pickers that sample.
std::size_t pick_weighted(CycleContext& ctx, std::span<const ScoredEndpoint> scored,
                          double exponent);

class WeightedRandomPicker final : public PluginBase<Picker> {
 public:
  static constexpr std::string_view kType = "weighted-random-picker";

  struct Config {
    double scoreExponent = 1.0;  // > 0 and <= 100; 1 = probability proportional to the score
    std::string validate() const;
  };

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  WeightedRandomPicker(std::string name, Config config)
      : PluginBase(kType, std::move(name)), config_(config) {}
  explicit WeightedRandomPicker(std::string name)
      : WeightedRandomPicker(std::move(name), Config()) {}

  // Picker
  std::size_t pick(CycleContext& ctx, std::span<const ScoredEndpoint> scored) const override;

  const Config& config() const { return config_; }

 private:
  Config config_;
};

}  // namespace llmd::epp
