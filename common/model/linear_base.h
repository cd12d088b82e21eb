#pragma once
// A sign-constrained linear estimate of a latency in milliseconds, used as the trees' base
// margin.
//
// Why: regression trees are piecewise constant, so a pod whose queue grows past anything in the
// training window is predicted at the last level seen, and at steady load the differences
// between pods (a few hundred tokens more in flight) drown in the trees' noise. The latency of
// an LLM server is close to linear in the work ahead of a request (queued uncached prefill
// tokens, running decodes, its own uncached prompt), so a linear term in the columns the schema
// marks as monotone carries the ranking and the extrapolation, and the trees model what is
// left. Each coefficient has the sign of features::monotone_direction (a longer queue never
// makes a pod faster); categorical and unconstrained columns get 0.
//
// Margin space: the trees of a mean model fit milliseconds, so the base margin is the estimate
// itself; those of a quantile model fit log1p(ms), so it is log1p(max(estimate, 0)).
//
// Immutable after fitting; safe to share across threads.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "common/features/schema.h"
#include "common/model/booster.h"

namespace llmd::model {

struct LinearBase {
  std::vector<double> coef;  // per column of the feature set, ms per unit
  double intercept = 0;      // ms
  bool log_margin = false;   // base margin = log1p(max(estimate, 0)) instead of the estimate

  // Estimate in ms for one row of columns(set) floats (NaN contributes nothing).
  double estimate_ms(const float* row) const noexcept;
  // What the trees start from for this row.
  float margin(const float* row) const noexcept;

  std::string to_json() const;
  // Throws ModelError when the text is not a base for `columns` columns.
  static LinearBase from_json(const std::string& text, std::size_t columns);
};

// Least squares of `labels_ms` on the monotone columns of `set` (row-major x), ridge-damped,
// each coefficient held to its monotone sign (projected coordinate descent on standardized
// columns, exact for this small system). Returns a base with every coefficient 0 and the mean
// as intercept when no column explains anything.
LinearBase fit_linear_base(features::FeatureSet set, DenseView x, std::span<const float> labels_ms,
                           bool log_margin);

}  // namespace llmd::model
