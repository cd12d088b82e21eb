#pragma once
// Hold-out evaluation of a fitted model (pure).
#include <cstddef>
#include <span>
#include <string>

namespace llmd::trainer {

struct Evaluation {
  std::size_t samples = 0;
  double pinball_loss = 0;       // quantile objective
  double coverage_percent = 0;   // % of actuals <= prediction
  double violation_percent = 0;  // 100 - coverage
  double mae = 0;
  double rmse = 0;
  double mape_percent = 0;
  std::string evaluated_at;  // RFC 3339
};

Evaluation evaluate(std::span<const double> predicted, std::span<const double> actual,
                    double alpha);

}  // namespace llmd::trainer
