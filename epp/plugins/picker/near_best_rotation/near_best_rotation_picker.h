#pragma once
// near-best-rotation-picker: among the pods near the best, the one this picker chose least
// recently (ties at random with the cycle's Rng).
//
// Why: when pods are alike (no shared prefix, equal load) a model's error is of the order of
// the real differences between them, and a random picker sends two close arrivals to the same
// pod now and then; a strict rotation never does, which is why round-robin is hard to beat
// on identical pods below saturation. Rotating among the near-best keeps that spacing while
// the predictions still exclude pods they call clearly worse. A request whose prefix some pod
// holds is the opposite case: where it goes decides what it costs, so (optionally) it is drawn
// with probability ~ score^k like weighted-random-picker and only uncached requests rotate.
//
// Threading: pick() runs on any scheduling thread; the last-pick sequence per pod is guarded
// by a mutex held for one pass over the candidates (no I/O, no allocation for known pods).
// State is per pipeline generation, like round-robin's counter: a reload restarts it.
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

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
    // How far from the best a pod may be and still count as near-best; in [0, 1].
    double tolerance = 0.1;
    // "score": score >= (1 - tolerance) x best score. "predictedTTFT": predicted TTFT <=
    // (1 + tolerance) x the lowest predicted TTFT among the pods with a positive score, so the
    // set does not depend on how the scorer normalises (min-max stretches 18.0 vs 18.5 ms over
    // the whole range); without predictions it falls back to "score".
    std::string nearBestBy = "score";
    // 0: every request rotates. k > 0: a request for which some candidate has a prefix match
    // is drawn with probability ~ score^k instead; only requests no pod has cached rotate.
    double cachedRequestExponent = 0;
    // false: a request with SLO headers is drawn ~ score^k as well (k = cachedRequestExponent,
    // which must then be > 0). Its scores rank SLO headroom buckets, and rotating over every
    // pod that meets the SLO spends the headroom of the fast pods on the slow ones (hold-out
    // pool of 8 fast + 4 slow pods with SLO headers: TTFT p95 +10 % when rotated).
    bool rotateSloRequests = true;
    // The k for requests with SLO headers that no candidate has cached (rotateSloRequests:
    // false, which setting it > 0 implies unless rotateSloRequests is set); 0 =
    // cachedRequestExponent. Where a request goes decides a cached one's cost to
    // the pool, so a sharp k pays there; uncached SLO traffic drawn that sharply piles close
    // arrivals onto the one pod the last scrape showed best.
    double uncachedSloRequestExponent = 0;
    std::string validate() const;
  };

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  NearBestRotationPicker(std::string name, Config config)
      : PluginBase(kType, std::move(name)), config_(config) {}

  // Picker
  std::size_t pick(CycleContext& ctx, std::span<const ScoredEndpoint> scored) const override;
  std::vector<AttributeKey> consumes() const override;

  const Config& config() const { return config_; }

 private:
  // Marks the near-best candidates; returns false when none qualifies by predictions.
  // Every candidate with a prediction has the same predicted TTFT (and there are several).
  bool predictions_tie(std::span<const ScoredEndpoint> scored) const;
  bool near_by_prediction(std::span<const ScoredEndpoint> scored, bool any_positive,
                          std::vector<char>& near) const;

  Config config_;
  mutable std::mutex mu_;
  mutable uint64_t picks_ = 0;                                   // guarded by mu_
  mutable std::unordered_map<std::string, uint64_t> last_pick_;  // guarded by mu_; 0 = never
};

}  // namespace llmd::epp
