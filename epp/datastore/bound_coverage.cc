#include "epp/datastore/bound_coverage.h"

#include <algorithm>
#include <cmath>

namespace llmd::epp {

void BoundCoverage::add(double bound_ms, double actual_ms) {
  if (!std::isfinite(bound_ms) || !std::isfinite(actual_ms) || !(bound_ms > 0) ||
      !(actual_ms >= 0)) {
    return;
  }
  // +1 ms, as PodResidual: sub-millisecond bounds must not turn jitter into large ratios.
  ratio_[next_] = static_cast<float>((actual_ms + 1.0) / (bound_ms + 1.0));
  next_ = (next_ + 1) % kWindow;
  n_ = std::min(kWindow, n_ + 1);
  if (++since_ >= kRecomputeEvery) {
    recompute();
  }
}

void BoundCoverage::recompute() {
  since_ = 0;
  if (n_ < kMinSamples) {
    return;
  }
  std::array<float, kWindow> sorted = ratio_;
  auto end = sorted.begin() + static_cast<std::ptrdiff_t>(n_);
  auto k = static_cast<std::ptrdiff_t>(std::ceil(kTargetCoverage * static_cast<double>(n_))) - 1;
  k = std::clamp<std::ptrdiff_t>(k, 0, static_cast<std::ptrdiff_t>(n_) - 1);
  std::nth_element(sorted.begin(), sorted.begin() + k, end);
  factor_ =
      std::clamp(static_cast<double>(sorted[static_cast<std::size_t>(k)]), kMinFactor, kMaxFactor);
}

}  // namespace llmd::epp
