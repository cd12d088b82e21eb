#include "trainer/evaluation.h"

#include <cmath>

#include "common/util/time.h"

namespace llmd::trainer {

Evaluation evaluate(std::span<const double> predicted, std::span<const double> actual,
                    double alpha) {
  Evaluation e;
  e.evaluated_at = util::now_rfc3339();
  const std::size_t n = std::min(predicted.size(), actual.size());
  e.samples = n;
  if (n == 0) {
    return e;
  }
  double pinball = 0, abs_err = 0, sq_err = 0, ape = 0;
  std::size_t covered = 0, ape_n = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double diff = actual[i] - predicted[i];
    pinball += diff >= 0 ? alpha * diff : (alpha - 1.0) * diff;
    abs_err += std::fabs(diff);
    sq_err += diff * diff;
    if (actual[i] <= predicted[i]) {
      ++covered;
    }
    if (actual[i] > 0) {
      ape += std::fabs(diff) / actual[i];
      ++ape_n;
    }
  }
  const double dn = static_cast<double>(n);
  e.pinball_loss = pinball / dn;
  e.coverage_percent = 100.0 * static_cast<double>(covered) / dn;
  e.violation_percent = 100.0 - e.coverage_percent;
  e.mae = abs_err / dn;
  e.rmse = std::sqrt(sq_err / dn);
  e.mape_percent = ape_n > 0 ? 100.0 * ape / static_cast<double>(ape_n) : 0.0;
  return e;
}

}  // namespace llmd::trainer
