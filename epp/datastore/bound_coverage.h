#pragma once
// How often a pool's latency bounds held lately, and the factor that would have made them hold
// as often as they claim. The predictor's TTFT/TPOT are p90 bounds, calibrated by the trainer
// on its hold-out of past samples; an SLO check trusts them to hold for 9 requests in 10. When
// the pool moves into a state the window has not seen (a load ramp, the first seconds past
// saturation: the batches grow while the trees predict the last level they know), the bounds
// hold far less often (the routing benchmark's SLO run: 55-70 % TPOT coverage at 100-150 req/s)
// and pods that will miss are admitted as "meeting" the SLO. Split conformal calibration on
// the live stream: the bound is scaled by the 90th percentile of actual / bound over the last
// kWindow observations, so the SLO check uses a bound that held for 9 in 10 of them.
// Plain data guarded by PodRegistry's mutex; no clock or thread of its own.
#include <array>
#include <cstddef>

namespace llmd::epp {

class BoundCoverage {
 public:
  static constexpr std::size_t kWindow = 256;
  // The factor moves off 1 once this many observations were seen.
  static constexpr std::size_t kMinSamples = 64;
  static constexpr double kTargetCoverage = 0.9;
  // Bounds: one wild window never scales a prediction by more than this (or below kMinFactor).
  static constexpr double kMaxFactor = 4;
  static constexpr double kMinFactor = 0.5;

  // One observation of a bound and what the pod then took. Ignored unless the bound is
  // positive and both are finite, the actual non-negative.
  void add(double bound_ms, double actual_ms);
  // The scale for a bound to hold kTargetCoverage of the window's observations; 1 until
  // kMinSamples. Recomputed every kRecomputeEvery observations (selecting the percentile per
  // request would cost more than the rest of the cycle).
  static constexpr std::size_t kRecomputeEvery = 16;
  double factor() const { return factor_; }
  std::size_t size() const { return n_; }

 private:
  void recompute();
  std::array<float, kWindow> ratio_{};
  std::size_t n_ = 0, next_ = 0, since_ = 0;
  double factor_ = 1.0;
};

}  // namespace llmd::epp
