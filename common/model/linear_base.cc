#include "common/model/linear_base.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace llmd::model {

double LinearBase::estimate_ms(const float* row) const noexcept {
  double y = intercept;
  for (std::size_t c = 0; c < coef.size(); ++c) {
    if (coef[c] != 0.0 && !std::isnan(row[c])) {
      y += coef[c] * static_cast<double>(row[c]);
    }
  }
  return y;
}

float LinearBase::margin(const float* row) const noexcept {
  double y = estimate_ms(row);
  return static_cast<float>(log_margin ? std::log1p(std::max(y, 0.0)) : y);
}

std::string LinearBase::to_json() const {
  nlohmann::json j = {{"coef", coef}, {"intercept", intercept}, {"log_margin", log_margin}};
  return j.dump();
}

LinearBase LinearBase::from_json(const std::string& text, std::size_t columns) {
  try {
    auto j = nlohmann::json::parse(text);
    LinearBase b;
    b.coef = j.at("coef").get<std::vector<double>>();
    b.intercept = j.at("intercept").get<double>();
    b.log_margin = j.at("log_margin").get<bool>();
    if (b.coef.size() != columns) {
      throw ModelError("linear base has " + std::to_string(b.coef.size()) + " coefficients, " +
                       "the feature set " + std::to_string(columns) + " columns");
    }
    bool finite = std::isfinite(b.intercept);
    for (double c : b.coef) {
      finite = finite && std::isfinite(c);
    }
    if (!finite) {
      throw ModelError("linear base has a non-finite coefficient");
    }
    return b;
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(std::string("bad linear base: ") + e.what());
  }
}

LinearBase fit_linear_base(features::FeatureSet set, DenseView x, std::span<const float> labels_ms,
                           bool log_margin) {
  const auto cols = features::columns(set);
  LinearBase base;
  base.log_margin = log_margin;
  base.coef.assign(cols.size(), 0.0);
  const std::size_t n = x.rows;
  if (n == 0 || labels_ms.size() != n || x.cols != cols.size()) {
    return base;
  }
  // The monotone numeric columns take part; their standardized values form the system.
  std::vector<std::size_t> used;
  std::vector<int> sign;
  for (std::size_t c = 0; c < cols.size(); ++c) {
    int d = features::monotone_direction(set, cols[c]);
    if (d != 0 && !features::is_categorical(cols[c])) {
      used.push_back(c);
      sign.push_back(d);
    }
  }
  const std::size_t p = used.size();
  auto value = [&](std::size_t i, std::size_t k) {
    float v = x.data[i * x.cols + used[k]];
    return std::isnan(v) ? 0.0 : static_cast<double>(v);
  };
  double y_mean = 0;
  std::vector<double> mu(p, 0.0), sd(p, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    y_mean += labels_ms[i];
    for (std::size_t k = 0; k < p; ++k) {
      mu[k] += value(i, k);
    }
  }
  y_mean /= static_cast<double>(n);
  for (auto& m : mu) {
    m /= static_cast<double>(n);
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < p; ++k) {
      double d = value(i, k) - mu[k];
      sd[k] += d * d;
    }
  }
  for (auto& s : sd) {
    s = std::sqrt(s / static_cast<double>(n));
  }
  // Gram matrix and moments of the standardized columns (constant columns stay out).
  std::vector<double> gram(p * p, 0.0), xy(p, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    double r = labels_ms[i] - y_mean;
    for (std::size_t a = 0; a < p; ++a) {
      if (sd[a] == 0) {
        continue;
      }
      double za = (value(i, a) - mu[a]) / sd[a];
      xy[a] += za * r;
      for (std::size_t b = a; b < p; ++b) {
        if (sd[b] != 0) {
          gram[a * p + b] += za * (value(i, b) - mu[b]) / sd[b];
        }
      }
    }
  }
  for (std::size_t a = 0; a < p; ++a) {
    for (std::size_t b = 0; b < a; ++b) {
      gram[a * p + b] = gram[b * p + a];
    }
  }
  // Ridge of 1 % of n per standardized coefficient: enough to settle collinear columns (waiting
  // and is_queued, the two in-flight token counts) without shrinking a real slope much.
  const double ridge = 0.01 * static_cast<double>(n);
  std::vector<double> beta(p, 0.0);
  for (int sweep = 0; sweep < 200; ++sweep) {
    double change = 0;
    for (std::size_t a = 0; a < p; ++a) {
      if (sd[a] == 0) {
        continue;
      }
      double rest = xy[a];
      for (std::size_t b = 0; b < p; ++b) {
        if (b != a) {
          rest -= gram[a * p + b] * beta[b];
        }
      }
      double next = rest / (gram[a * p + a] + ridge);
      next = sign[a] > 0 ? std::max(next, 0.0) : std::min(next, 0.0);
      change = std::max(change, std::abs(next - beta[a]));
      beta[a] = next;
    }
    if (change < 1e-9 * (1.0 + std::abs(y_mean))) {
      break;
    }
  }
  base.intercept = y_mean;
  for (std::size_t k = 0; k < p; ++k) {
    if (sd[k] != 0) {
      base.coef[used[k]] = beta[k] / sd[k];
      base.intercept -= beta[k] / sd[k] * mu[k];
    }
  }
  return base;
}

}  // namespace llmd::model
