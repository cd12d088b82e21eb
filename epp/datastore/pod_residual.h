#pragma once
// How far one pod's observed latencies sit from the shared model's predictions, relative to the
// other pods of its pool: the pod effect the model cannot see (a slower GPU class, a noisy
// neighbour, a different engine build). The model is trained on every pod's samples with no
// pod identity, so it predicts the pool's mixture; a pod that is consistently slower than
// predicted, compared with its peers, gets its predictions scaled up by that much.
// Plain data guarded by PodRegistry's mutex; no clock or thread of its own.
#include <chrono>
#include <cstdint>

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

  // One observation: the model predicted `model_ms`, the pod took `actual_ms`. Ignored unless
  // both are finite, the prediction positive and the actual non-negative.
  void add(double model_ms, double actual_ms, TimePoint now);
  bool counts() const { return n_ >= kMinSamples; }
  double mean() const { return mean_; }
  // exp(this pod's mean - `pool_mean`) when significant, faded by age; else 1.
  double factor(double pool_mean, TimePoint now) const;

 private:
  double mean_ = 0;  // of log((actual + 1) / (model + 1))
  double sq_ = 0;    // mean of its square
  double n_ = 0;     // observations, capped at kWindow
  TimePoint at_{};   // of the last observation
};

}  // namespace llmd::epp
