#pragma once
// A fitted latency model as published by the trainer and served by predictors.
//
// A TargetModel is one XGBoost booster, optionally on top of a linear base (the trees then fit
// what the base leaves; margin = trees + base), plus the map from the margin to milliseconds:
//   - mean objective:      ms = margin                       (squared error on ms)
//   - quantile objective:  ms = expm1(margin + q(margin))    (location-scale in log space:
//     the booster fits E[log1p(ms)], q is the calibrated alpha-quantile of the residual,
//     piecewise-linear in the margin so that the spread may differ between load regimes)
// The map travels inside the model bytes as booster attributes, so a model file is
// self-describing and remains XGBoost's own (UBJSON) model format.
//
// Immutable after construction; shared as shared_ptr<const ...> and safe to use from any thread.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/features/schema.h"
#include "common/model/booster.h"
#include "common/model/linear_base.h"

namespace llmd::model {

enum class Objective { kQuantile, kMean };
std::string_view objective_name(Objective o);
std::optional<Objective> parse_objective(std::string_view s);

struct OutputTransform {
  bool log1p = false;
  // Residual quantile in log space at increasing margins `centers` (linear between them,
  // flat outside). Empty = no offset.
  std::vector<double> centers;
  std::vector<double> offsets;

  double offset_at(double margin) const;
  double to_ms(float margin) const;  // clipped at 0
  // The central estimate without the quantile offset: expm1(location), the median of the
  // location-scale model, for the quantile objective; the value itself for the mean objective.
  // What ranks pods and what a prediction's error is measured against; to_ms is the bound the
  // SLO checks need. Clipped at 0.
  double to_point_ms(float margin) const;
  std::string to_json() const;
  static OutputTransform from_json(const std::string& text);  // throws ModelError
};

ColumnInfo column_info(features::FeatureSet set);

class TargetModel {
 public:
  TargetModel(Booster booster, features::FeatureSet set, OutputTransform transform,
              Objective objective, int64_t version = 0,
              std::optional<LinearBase> linear = std::nullopt);
  // Loads bytes written by serialize(); throws ModelError when they are not a valid model.
  static std::shared_ptr<const TargetModel> load(std::string_view bytes);
  std::string serialize(int64_t version) const;

  features::FeatureSet feature_set() const { return set_; }
  const OutputTransform& transform() const { return transform_; }
  Objective objective() const { return objective_; }
  // Version stamped by serialize() (0 for a model that was never published).
  int64_t version() const { return version_; }
  // Base score of the booster (in the booster's output space).
  double base_score() const;
  const Booster& booster() const { return booster_; }
  const std::optional<LinearBase>& linear_base() const { return linear_; }

  // Milliseconds per row (via XGBoost's own predictor).
  std::vector<double> predict(std::span<const features::FeatureInput> rows) const;
  // Margin per row: booster output plus the linear base's margin.
  std::vector<float> predict_margin(std::span<const features::FeatureInput> rows) const;

 private:
  Booster booster_;
  features::FeatureSet set_;
  OutputTransform transform_;
  Objective objective_;
  int64_t version_ = 0;
  std::optional<LinearBase> linear_;
};
using TargetModelPtr = std::shared_ptr<const TargetModel>;

// The ensemble pair published as `ttft_gated` / `tpot_gated`: rows with waiting = 0 go to
// `noqueue`, the others to `queued`. File format (little-endian): "LLMDGAT1" | u64 n1 |
// noqueue model bytes | u64 n2 | queued model bytes; each part is a serialized TargetModel.
struct GatedModel {
  TargetModelPtr noqueue;
  TargetModelPtr queued;
  std::string serialize(int64_t version) const;
  static std::shared_ptr<const GatedModel> load(std::string_view bytes);  // throws ModelError
  // The two serialized TargetModels inside gated bytes (noqueue, queued); throws ModelError.
  static std::pair<std::string_view, std::string_view> split(std::string_view bytes);
};
using GatedModelPtr = std::shared_ptr<const GatedModel>;

// The models of one target as used for prediction: base model, optional ensemble.
struct TargetPredictor {
  TargetModelPtr base;
  GatedModelPtr gated;  // null = ensemble inactive
  // Per row in milliseconds; routes rows to the gated sub-models when present.
  std::vector<double> predict(std::span<const features::FeatureInput> rows) const;
};

// A model that predicts `value_ms` for every row (cold start).
TargetModelPtr make_constant_model(features::FeatureSet set, double value_ms, Objective objective);

}  // namespace llmd::model
