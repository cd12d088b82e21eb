#include "epp/datastore/pod_residual.h"

#include <algorithm>
#include <cmath>

namespace llmd::epp {

void PodResidual::add(double model_ms, double actual_ms, TimePoint now) {
  if (!std::isfinite(model_ms) || !std::isfinite(actual_ms) || !(model_ms > 0) ||
      !(actual_ms >= 0)) {
    return;
  }
  // +1 ms keeps sub-millisecond values from dominating; the clamp bounds one outlier's weight.
  double x = std::clamp(std::log((actual_ms + 1) / (model_ms + 1)), -3.0, 3.0);
  n_ = std::min(kWindow, n_ + 1);
  mean_ += (x - mean_) / n_;
  sq_ += (x * x - sq_) / n_;
  at_ = now;
}

double PodResidual::factor(double pool_mean, TimePoint now) const {
  if (!counts()) {
    return 1.0;
  }
  double dev = mean_ - pool_mean;
  double se = std::sqrt(std::max(0.0, sq_ - mean_ * mean_) / n_);
  if (!(std::fabs(dev) > kSignificance * se)) {
    return 1.0;
  }
  double age = std::max(0.0, std::chrono::duration<double>(now - at_).count());
  dev *= std::exp(-age / std::chrono::duration<double>(kForget).count());
  return std::exp(std::clamp(dev, -std::log(kMaxFactor), std::log(kMaxFactor)));
}

}  // namespace llmd::epp
