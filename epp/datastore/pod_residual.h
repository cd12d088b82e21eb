#pragma once
// How far one pod's observed latencies sit from the shared model's predictions, relative to the
// other pods of its pool: the pod effect the model cannot see (a slower GPU class, a noisy
// neighbour, a different engine build). The model is trained on every pod's samples with no
// pod identity, so it predicts the pool's mixture; a pod that is consistently slower than
// predicted, compared with its peers, gets its predictions scaled up by that much.
//
// Each observation arrives already referenced to its pool at the moment it was made
// (PoolResidualReference): log(actual / model) minus the pool's running mean of the same. The
// model's error common to the pool (a stale model during a load ramp) is in both terms and
// cancels, so a pod the picker avoided keeps "on a par with the pool when last seen" rather
// than "faster than the pool", which compared with peers observed later it would look.
// Plain data guarded by its PodLive's writer lock; no clock or thread of its own.
#include <chrono>
#include <cstdint>
#include <optional>

namespace llmd::epp {

class PodResidual {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // Running mean over about the last kWindow observations.
  static constexpr double kWindow = 64;
  // A pod's mean counts (and is compared with its peers) after this many observations.
  static constexpr double kMinSamples = 16;
  // Residuals come in runs (one queue state yields many similar first tokens), so the i.i.d.
  // standard error of the mean understates the noise several times over: a pod is set apart
  // only when its mean differs from the pool's by more than kSignificance of them. Routing
  // benchmark, pl_least, seeds 1-3 (6 for blog), g-mean TTFT p95 against no correction:
  // hetero (6 fast + 4 slow pods) -22 %; 10 identical pods unchanged (A, B, C, D, sharegpt,
  // production, SLO within +-0.5 %); a threshold of 3 instead moved one 4-pod blog seed +15 %.
  static constexpr double kSignificance = 8;
  // Evidence fades with its age: a pod the picker avoids gets no new observations, and must
  // not be avoided forever for what it did once.
  static constexpr std::chrono::seconds kForget{30};
  // The correction never scales a prediction by more than this (or less than its inverse).
  static constexpr double kMaxFactor = 4;

  // The log ratio an observation contributes, log((actual + 1) / (model + 1)) clamped to +-3;
  // nullopt unless both are finite, the prediction positive and the actual non-negative.
  static std::optional<double> log_ratio(double model_ms, double actual_ms);
  // One observation: `x` a log_ratio, `reference` its pool's at the same moment.
  void add(double x, double reference, TimePoint now);
  bool counts() const { return n_ >= kMinSamples; }
  double mean() const { return mean_; }
  // exp(this pod's mean) when significant, faded by age; else 1.
  double factor(TimePoint now) const;

 private:
  double mean_ = 0;  // of log_ratio - reference
  double sq_ = 0;    // mean of its square
  double n_ = 0;     // observations, capped at kWindow
  TimePoint at_{};   // of the last observation
};

// The pool's running mean of log_ratio over about its last kWindow observations, whichever
// pods made them: what "on a par with the pool" means at one moment. Plain data guarded by
// its PoolLearning's writer lock.
class PoolResidualReference {
 public:
  static constexpr double kWindow = PodResidual::kWindow;
  // Adds `x` and returns the reference the observation is judged against (including itself,
  // so the pool's first observation is referenced to itself).
  double add(double x);
  double value() const { return mean_; }

 private:
  double mean_ = 0;
  double n_ = 0;  // observations, capped at kWindow
};

}  // namespace llmd::epp
