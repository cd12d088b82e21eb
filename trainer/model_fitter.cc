#include "trainer/model_fitter.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>

namespace llmd::trainer {
namespace {

using features::FeatureSet;

struct Matrix {
  std::vector<float> x;
  std::vector<float> y;
  std::size_t cols = 0;
};

Matrix build(FeatureSet set, const std::vector<Sample>& samples,
             const std::vector<std::size_t>& idx, bool log_target) {
  Matrix m;
  m.cols = features::columns(set).size();
  m.x.resize(idx.size() * m.cols);
  m.y.resize(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const Sample& s = samples[idx[i]];
    features::fill_row(s.features, set, &m.x[i * m.cols]);
    m.y[i] =
        log_target ? static_cast<float>(std::log1p(static_cast<double>(s.actual_ms))) : s.actual_ms;
  }
  return m;
}

double mean(const std::vector<float>& v) {
  double s = 0;
  for (float f : v) {
    s += f;
  }
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

model::OutputTransform calibrate(const FitConfig& cfg, const std::vector<float>& margins,
                                 const std::vector<float>& z) {
  model::OutputTransform t;
  t.log1p = true;
  const std::size_t n = margins.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return margins[a] < margins[b]; });
  std::size_t groups = std::clamp<std::size_t>(n / std::max<std::size_t>(1, cfg.min_rows_per_group),
                                               1, cfg.max_calibration_groups);
  for (std::size_t g = 0; g < groups; ++g) {
    std::size_t lo = g * n / groups;
    std::size_t hi = (g + 1) * n / groups;
    std::vector<double> centre;
    std::vector<double> residual;
    for (std::size_t k = lo; k < hi; ++k) {
      centre.push_back(margins[order[k]]);
      residual.push_back(static_cast<double>(z[order[k]]) - margins[order[k]]);
    }
    t.centers.push_back(empirical_quantile(centre, 0.5));
    t.offsets.push_back(empirical_quantile(residual, cfg.alpha));
  }
  // Equal centres would make interpolation divide by zero: keep the first of each run.
  for (std::size_t k = 1; k < t.centers.size();) {
    if (t.centers[k] <= t.centers[k - 1]) {
      t.offsets[k - 1] = std::max(t.offsets[k - 1], t.offsets[k]);
      t.centers.erase(t.centers.begin() + static_cast<std::ptrdiff_t>(k));
      t.offsets.erase(t.offsets.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      ++k;
    }
  }
  // Total prediction location + offset must not decrease with the location.
  for (std::size_t k = 1; k < t.centers.size(); ++k) {
    t.offsets[k] = std::max(t.offsets[k], t.offsets[k - 1] - (t.centers[k] - t.centers[k - 1]));
  }
  return t;
}

// The linear base fitted on `m`'s rows (labels in ms: `ms`) and each row's base margin.
std::optional<model::LinearBase> fit_base(const FitConfig& cfg, FeatureSet set, const Matrix& m,
                                          const std::vector<float>& ms, bool log_margin,
                                          std::vector<float>& margins) {
  margins.clear();
  if (!cfg.linear_base) {
    return std::nullopt;
  }
  const std::size_t rows = ms.size();
  auto base = model::fit_linear_base(set, {m.x.data(), rows, m.cols}, ms, log_margin);
  margins.resize(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    margins[i] = base.margin(&m.x[i * m.cols]);
  }
  return base;
}

std::vector<float> labels_ms(const std::vector<Sample>& samples,
                             const std::vector<std::size_t>& idx) {
  std::vector<float> out(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    out[i] = samples[idx[i]].actual_ms;
  }
  return out;
}

}  // namespace

double empirical_quantile(std::vector<double>& values, double q) {
  if (values.empty()) {
    return 0.0;
  }
  std::sort(values.begin(), values.end());
  double pos = q * static_cast<double>(values.size() - 1);
  std::size_t lo = static_cast<std::size_t>(std::floor(pos));
  std::size_t hi = std::min(lo + 1, values.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return values[lo] + frac * (values[hi] - values[lo]);
}

model::TargetModelPtr fit_target_model(const FitConfig& cfg, FeatureSet set,
                                       const std::vector<Sample>& samples, uint64_t seed) {
  if (samples.empty()) {
    throw model::ModelError("no samples to fit");
  }
  model::TrainParams params = cfg.params;
  params.seed = seed;
  const auto columns = model::column_info(set);
  std::vector<std::size_t> all(samples.size());
  std::iota(all.begin(), all.end(), 0);

  if (cfg.objective == model::Objective::kMean) {
    Matrix m = build(set, samples, all, false);
    std::vector<float> base_margins;
    auto base = fit_base(cfg, set, m, m.y, false, base_margins);
    auto booster = model::Booster::train(params, columns, {m.x.data(), all.size(), m.cols}, m.y,
                                         base ? 0.0 : mean(m.y), base_margins);
    return std::make_shared<const model::TargetModel>(
        std::move(booster), set, model::OutputTransform{}, cfg.objective, 0, std::move(base));
  }

  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  std::size_t n_cal =
      static_cast<std::size_t>(cfg.calibration_fraction * static_cast<double>(samples.size()));
  std::vector<std::size_t> fit_idx(all.begin(), all.end() - static_cast<std::ptrdiff_t>(n_cal));
  std::vector<std::size_t> cal_idx(all.end() - static_cast<std::ptrdiff_t>(n_cal), all.end());
  if (n_cal < 20) {
    // Too few rows to hold any back: calibrate in-sample (slightly optimistic spread).
    fit_idx = all;
    cal_idx = all;
  }
  Matrix fit = build(set, samples, fit_idx, true);
  std::vector<float> base_margins;
  auto base = fit_base(cfg, set, fit, labels_ms(samples, fit_idx), true, base_margins);
  auto booster = model::Booster::train(params, columns, {fit.x.data(), fit_idx.size(), fit.cols},
                                       fit.y, base ? 0.0 : mean(fit.y), base_margins);
  Matrix cal = build(set, samples, cal_idx, true);
  auto margins = booster.predict(columns, {cal.x.data(), cal_idx.size(), cal.cols});
  if (base) {
    for (std::size_t i = 0; i < cal_idx.size(); ++i) {
      margins[i] += base->margin(&cal.x[i * cal.cols]);
    }
  }
  auto transform = calibrate(cfg, margins, cal.y);
  return std::make_shared<const model::TargetModel>(std::move(booster), set, std::move(transform),
                                                    cfg.objective, 0, std::move(base));
}

}  // namespace llmd::trainer
