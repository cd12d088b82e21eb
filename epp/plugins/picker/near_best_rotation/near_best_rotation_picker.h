#pragma once
// near-best-rotation-picker: among the pods scored within `tolerance` of the best score, the
// one this picker chose least recently (ties at random with the cycle's Rng).
//
// Why: when pods are alike (no shared prefix, equal load) a model's error is of the order of
// the real differences between them, and a random picker sends two close arrivals to the same
// pod now and then; a strict rotation never does, which is why round-robin is hard to beat
// on identical pods below saturation. Rotating among the near-best keeps that spacing while
// the scores still exclude pods the predictions call clearly worse.
//
// Threading: pick() runs on any scheduling thread; the last-pick sequence per pod is guarded
// by a mutex held for one pass over the candidates (no I/O, no allocation for known pods).
// State is per pipeline generation, like round-robin's counter: a reload restarts it.
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class NearBestRotationPicker final : public PluginBase<Picker> {
 public:
  static constexpr std::string_view kType = "near-best-rotation-picker";
  // Pods tracked before the history is forgotten (discovery can churn pod names forever).
  static constexpr std::size_t kMaxTrackedPods = 4096;

  struct Config {
    // A pod is near-best when score >= (1 - tolerance) * best score.
    double tolerance = 0.1;
    std::string validate() const;
  };

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  NearBestRotationPicker(std::string name, Config config)
      : PluginBase(kType, std::move(name)), config_(config) {}

  // Picker
  std::size_t pick(CycleContext& ctx, std::span<const ScoredEndpoint> scored) const override;

 private:
  Config config_;
  mutable std::mutex mu_;
  mutable uint64_t picks_ = 0;                                  // guarded by mu_
  mutable std::unordered_map<std::string, uint64_t> last_pick_;  // guarded by mu_; 0 = never
};

}  // namespace llmd::epp
