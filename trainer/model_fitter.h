#pragma once
// Fits one target model from samples. Pure function of its inputs (deterministic per seed);
// runs on the training thread with a private booster.
//
// Quantile objective (xgboost 1.7 has no native quantile loss): location-scale in log space.
//   1. Split the samples: (1 - calibration_fraction) to fit, the rest to calibrate.
//   2. Fit the mean of z = log1p(ms) with squared error (the location).
//   3. On the calibration rows (never seen by the trees, so residuals are honest), sort by
//      predicted location, cut into equal-count groups and take the alpha-quantile of the
//      residual z - location in each group (the scale, per load regime).
//   4. Serve ms = expm1(location + offset(location)), offset piecewise-linear between group
//      centres and made non-decreasing in total so predictions never fall as the location rises.
// Log space makes multiplicative noise homoscedastic; the per-group offsets absorb what is left
// (additive noise matters most at low latency). Mean objective: squared error on ms.
// With linear_base, a linear estimate in ms is fitted first on the fit rows and the trees start
// from it (its log1p for the quantile objective).
#include <cstdint>
#include <vector>

#include "common/model/latency_model.h"
#include "trainer/sample_store.h"

namespace llmd::trainer {

struct FitConfig {
  model::Objective objective = model::Objective::kQuantile;
  double alpha = 0.9;
  model::TrainParams params;
  double calibration_fraction = 0.2;
  std::size_t max_calibration_groups = 8;
  std::size_t min_rows_per_group = 150;
  // Trees on top of a sign-constrained linear base (model::LinearBase): ranks pods by the work
  // ahead of a request and extrapolates past the training window.
  bool linear_base = false;
};

model::TargetModelPtr fit_target_model(const FitConfig& config, features::FeatureSet set,
                                       const std::vector<Sample>& samples, uint64_t seed);

// Linear-interpolated empirical quantile of `values` (sorted in place), q in [0,1].
double empirical_quantile(std::vector<double>& values, double q);

}  // namespace llmd::trainer
