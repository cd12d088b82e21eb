#include "common/model/latency_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace llmd::model {
namespace {

using features::FeatureInput;
using features::FeatureSet;

constexpr const char* kAttrSet = "llmd_feature_set";
constexpr const char* kAttrTransform = "llmd_transform";
constexpr const char* kAttrObjective = "llmd_objective";
constexpr const char* kAttrVersion = "llmd_version";
constexpr const char* kAttrLinearBase = "llmd_linear_base";

std::optional<FeatureSet> parse_feature_set(std::string_view s) {
  for (FeatureSet set : features::kAllFeatureSets) {
    if (features::feature_set_name(set) == s) {
      return set;
    }
  }
  return std::nullopt;
}

std::vector<float> build_matrix(FeatureSet set, std::span<const FeatureInput> rows) {
  const std::size_t cols = features::columns(set).size();
  std::vector<float> x(rows.size() * cols);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    features::fill_row(rows[i], set, &x[i * cols]);
  }
  return x;
}

}  // namespace

std::string_view objective_name(Objective o) {
  return o == Objective::kQuantile ? "quantile" : "mean";
}

std::optional<Objective> parse_objective(std::string_view s) {
  if (s == "quantile") {
    return Objective::kQuantile;
  }
  if (s == "mean") {
    return Objective::kMean;
  }
  return std::nullopt;
}

double OutputTransform::offset_at(double margin) const {
  if (centers.empty()) {
    return 0.0;
  }
  if (margin <= centers.front()) {
    return offsets.front();
  }
  if (margin >= centers.back()) {
    return offsets.back();
  }
  auto it = std::upper_bound(centers.begin(), centers.end(), margin);
  std::size_t hi = static_cast<std::size_t>(it - centers.begin());
  std::size_t lo = hi - 1;
  double t = (margin - centers[lo]) / (centers[hi] - centers[lo]);
  return offsets[lo] + t * (offsets[hi] - offsets[lo]);
}

double OutputTransform::to_ms(float margin) const {
  double m = static_cast<double>(margin);
  double v = log1p ? std::expm1(m + offset_at(m)) : m;
  return v > 0.0 ? v : 0.0;
}

double OutputTransform::to_point_ms(float margin) const {
  double m = static_cast<double>(margin);
  double v = log1p ? std::expm1(m) : m;
  return v > 0.0 ? v : 0.0;
}

std::string OutputTransform::to_json() const {
  nlohmann::json j = {{"kind", log1p ? "log1p_location_scale" : "identity"},
                      {"centers", centers},
                      {"offsets", offsets}};
  return j.dump();
}

OutputTransform OutputTransform::from_json(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    OutputTransform t;
    std::string kind = j.at("kind").get<std::string>();
    if (kind != "identity" && kind != "log1p_location_scale") {
      throw ModelError("unknown output transform '" + kind + "'");
    }
    t.log1p = kind == "log1p_location_scale";
    t.centers = j.at("centers").get<std::vector<double>>();
    t.offsets = j.at("offsets").get<std::vector<double>>();
    if (t.centers.size() != t.offsets.size() ||
        !std::is_sorted(t.centers.begin(), t.centers.end())) {
      throw ModelError("inconsistent output transform");
    }
    return t;
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(std::string("bad output transform: ") + e.what());
  }
}

ColumnInfo column_info(FeatureSet set) {
  ColumnInfo info;
  for (auto c : features::columns(set)) {
    info.names.emplace_back(features::column_name(c));
    info.categorical.push_back(features::is_categorical(c));
    info.monotone.push_back(features::monotone_direction(set, c));
  }
  return info;
}

TargetModel::TargetModel(Booster booster, FeatureSet set, OutputTransform transform,
                         Objective objective, int64_t version, std::optional<LinearBase> linear)
    : booster_(std::move(booster)),
      set_(set),
      transform_(std::move(transform)),
      objective_(objective),
      version_(version),
      linear_(std::move(linear)) {}

double TargetModel::base_score() const {
  try {
    std::string bytes = booster_.save();
    auto j = nlohmann::json::from_ubjson(bytes);
    return std::stod(j["learner"]["learner_model_param"]["base_score"].get<std::string>());
  } catch (const std::exception&) {
    return 0.0;
  }
}

std::shared_ptr<const TargetModel> TargetModel::load(std::string_view bytes) {
  Booster b = Booster::load(bytes);
  auto set_name = b.attr(kAttrSet);
  auto set = set_name ? parse_feature_set(*set_name) : std::nullopt;
  if (!set) {
    throw ModelError("model has no valid '" + std::string(kAttrSet) + "' attribute");
  }
  auto transform_text = b.attr(kAttrTransform);
  OutputTransform transform =
      transform_text ? OutputTransform::from_json(*transform_text) : OutputTransform{};
  auto objective_text = b.attr(kAttrObjective);
  Objective objective = objective_text ? parse_objective(*objective_text).value_or(Objective::kMean)
                                       : Objective::kMean;
  int64_t version = 0;
  if (auto v = b.attr(kAttrVersion)) {
    version = std::strtoll(v->c_str(), nullptr, 10);
  }
  std::optional<LinearBase> linear;
  if (auto text = b.attr(kAttrLinearBase)) {
    linear = LinearBase::from_json(*text, features::columns(*set).size());
  }
  return std::make_shared<const TargetModel>(std::move(b), *set, std::move(transform), objective,
                                             version, std::move(linear));
}

std::string TargetModel::serialize(int64_t version) const {
  // Attributes are stamped on a copy so the serving booster is never mutated.
  Booster copy = Booster::load(booster_.save());
  copy.set_attr(kAttrSet, std::string(features::feature_set_name(set_)));
  copy.set_attr(kAttrTransform, transform_.to_json());
  copy.set_attr(kAttrObjective, std::string(objective_name(objective_)));
  copy.set_attr(kAttrVersion, std::to_string(version));
  if (linear_) {
    copy.set_attr(kAttrLinearBase, linear_->to_json());
  }
  return copy.save();
}

std::vector<float> TargetModel::predict_margin(std::span<const FeatureInput> rows) const {
  if (rows.empty()) {
    return {};
  }
  std::vector<float> x = build_matrix(set_, rows);
  const std::size_t cols = features::columns(set_).size();
  std::vector<float> margins =
      booster_.predict(column_info(set_), DenseView{x.data(), rows.size(), cols});
  if (linear_) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      margins[i] += linear_->margin(&x[i * cols]);
    }
  }
  return margins;
}

std::vector<double> TargetModel::predict(std::span<const FeatureInput> rows) const {
  std::vector<float> margins = predict_margin(rows);
  std::vector<double> out(margins.size());
  for (std::size_t i = 0; i < margins.size(); ++i) {
    out[i] = transform_.to_ms(margins[i]);
  }
  return out;
}

namespace {
constexpr std::string_view kGatedMagic = "LLMDGAT1";

void put_part(std::string& out, const std::string& part) {
  uint64_t n = part.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof(n));
  out += part;
}

std::string_view get_part(std::string_view bytes, std::size_t& pos) {
  uint64_t n = 0;
  if (bytes.size() - pos < sizeof(n)) {
    throw ModelError("gated model truncated");
  }
  std::memcpy(&n, bytes.data() + pos, sizeof(n));
  pos += sizeof(n);
  if (bytes.size() - pos < n) {
    throw ModelError("gated model truncated");
  }
  std::string_view part = bytes.substr(pos, n);
  pos += n;
  return part;
}
}  // namespace

std::string GatedModel::serialize(int64_t version) const {
  std::string out(kGatedMagic);
  put_part(out, noqueue->serialize(version));
  put_part(out, queued->serialize(version));
  return out;
}

std::pair<std::string_view, std::string_view> GatedModel::split(std::string_view bytes) {
  if (bytes.substr(0, kGatedMagic.size()) != kGatedMagic) {
    throw ModelError("not a gated model (bad magic)");
  }
  std::size_t pos = kGatedMagic.size();
  std::string_view noqueue = get_part(bytes, pos);
  std::string_view queued = get_part(bytes, pos);
  if (pos != bytes.size()) {
    throw ModelError("gated model has trailing bytes");
  }
  return {noqueue, queued};
}

std::shared_ptr<const GatedModel> GatedModel::load(std::string_view bytes) {
  auto [noqueue, queued] = split(bytes);
  auto out = std::make_shared<GatedModel>();
  out->noqueue = TargetModel::load(noqueue);
  out->queued = TargetModel::load(queued);
  return out;
}

std::vector<double> TargetPredictor::predict(std::span<const FeatureInput> rows) const {
  if (!gated) {
    return base->predict(rows);
  }
  std::vector<FeatureInput> noqueue_rows;
  std::vector<FeatureInput> queued_rows;
  for (const auto& r : rows) {
    (features::is_queued(r) ? queued_rows : noqueue_rows).push_back(r);
  }
  auto nq = gated->noqueue->predict(noqueue_rows);
  auto q = gated->queued->predict(queued_rows);
  std::vector<double> out(rows.size());
  std::size_t a = 0;
  std::size_t b = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    out[i] = features::is_queued(rows[i]) ? q[b++] : nq[a++];
  }
  return out;
}

TargetModelPtr make_constant_model(FeatureSet set, double value_ms, Objective objective) {
  // One tree fitted to constant labels equal to the base score has all-zero leaves, so the
  // model predicts exactly value_ms (as float).
  const std::size_t cols = features::columns(set).size();
  std::vector<float> x(2 * cols, 0.0f);
  std::vector<float> y(2, static_cast<float>(value_ms));
  TrainParams p;
  p.num_trees = 1;
  p.subsample = 1.0;
  p.colsample_bytree = 1.0;
  p.min_child_weight = 0;
  Booster b = Booster::train(p, column_info(set), DenseView{x.data(), 2, cols}, y, value_ms);
  return std::make_shared<const TargetModel>(std::move(b), set, OutputTransform{}, objective);
}

}  // namespace llmd::model
