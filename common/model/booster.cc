#include "common/model/booster.h"

#include <algorithm>

#include <xgboost/c_api.h>

#include <cstdlib>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace llmd::model {
namespace {

void check(int rc, const char* what) {
  if (rc != 0) {
    throw ModelError(fmt::format("xgboost {} failed: {}", what, XGBGetLastError()));
  }
}

// Owns a DMatrix handle.
class DMatrix {
 public:
  DMatrix(const ColumnInfo& columns, DenseView x) {
    if (x.cols != columns.names.size()) {
      throw ModelError(
          fmt::format("matrix has {} columns, schema {}", x.cols, columns.names.size()));
    }
    check(XGDMatrixCreateFromMat(x.data, x.rows, x.cols, std::numeric_limits<float>::quiet_NaN(),
                                 &handle_),
          "XGDMatrixCreateFromMat");
    std::vector<const char*> names;
    std::vector<const char*> types;
    for (std::size_t i = 0; i < x.cols; ++i) {
      names.push_back(columns.names[i].c_str());
      types.push_back(columns.categorical[i] ? "c" : "q");
    }
    check(XGDMatrixSetStrFeatureInfo(handle_, "feature_name", names.data(), names.size()),
          "set feature_name");
    check(XGDMatrixSetStrFeatureInfo(handle_, "feature_type", types.data(), types.size()),
          "set feature_type");
  }
  ~DMatrix() { XGDMatrixFree(handle_); }
  DMatrix(const DMatrix&) = delete;
  DMatrix& operator=(const DMatrix&) = delete;
  DMatrixHandle get() const { return handle_; }

 private:
  DMatrixHandle handle_ = nullptr;
};

}  // namespace

Booster Booster::train(const TrainParams& p, const ColumnInfo& columns, DenseView x,
                       std::span<const float> labels, double base_score,
                       std::span<const float> base_margin) {
  if (labels.size() != x.rows || x.rows == 0) {
    throw ModelError(fmt::format("cannot train on {} rows with {} labels", x.rows, labels.size()));
  }
  if (!base_margin.empty() && base_margin.size() != x.rows) {
    throw ModelError(fmt::format("{} base margins for {} rows", base_margin.size(), x.rows));
  }
  DMatrix dtrain(columns, x);
  check(XGDMatrixSetFloatInfo(dtrain.get(), "label", labels.data(), labels.size()), "set label");
  if (!base_margin.empty()) {
    check(
        XGDMatrixSetFloatInfo(dtrain.get(), "base_margin", base_margin.data(), base_margin.size()),
        "set base_margin");
  }
  DMatrixHandle dm = dtrain.get();
  BoosterHandle h = nullptr;
  check(XGBoosterCreate(&dm, 1, &h), "XGBoosterCreate");
  Booster booster(h);
  auto set = [&](const char* k, const std::string& v) {
    check(XGBoosterSetParam(h, k, v.c_str()), k);
  };
  set("objective", "reg:squarederror");
  set("tree_method", "hist");
  set("max_depth", std::to_string(p.max_depth));
  set("eta", fmt::format("{}", p.learning_rate));
  set("subsample", fmt::format("{}", p.subsample));
  set("colsample_bytree", fmt::format("{}", p.colsample_bytree));
  set("min_child_weight", fmt::format("{}", p.min_child_weight));
  set("gamma", fmt::format("{}", p.gamma));
  set("alpha", fmt::format("{}", p.reg_alpha));
  set("lambda", fmt::format("{}", p.reg_lambda));
  set("base_score", fmt::format("{}", base_score));
  set("nthread", std::to_string(std::max(1, p.threads)));
  set("seed", std::to_string(p.seed));
  set("verbosity", "0");
  if (p.monotone &&
      std::any_of(columns.monotone.begin(), columns.monotone.end(), [](int d) { return d != 0; })) {
    std::string spec = "(";
    for (std::size_t i = 0; i < columns.monotone.size(); ++i) {
      spec += (i ? "," : "") + std::to_string(columns.monotone[i]);
    }
    set("monotone_constraints", spec + ")");
  }
  for (int i = 0; i < p.num_trees; ++i) {
    check(XGBoosterUpdateOneIter(h, i, dm), "XGBoosterUpdateOneIter");
  }
  return booster;
}

Booster Booster::load(std::string_view bytes) {
  BoosterHandle h = nullptr;
  check(XGBoosterCreate(nullptr, 0, &h), "XGBoosterCreate");
  Booster booster(h);
  check(XGBoosterLoadModelFromBuffer(h, bytes.data(), bytes.size()), "load model");
  // A serving booster is never trained again; one thread per predict call keeps concurrent
  // callers from fighting over the 2 cores.
  check(XGBoosterSetParam(h, "nthread", "1"), "nthread");
  return booster;
}

Booster::Booster(Booster&& other) noexcept : handle_(other.handle_) {
  other.handle_ = nullptr;
}

Booster& Booster::operator=(Booster&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) {
      XGBoosterFree(handle_);
    }
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

Booster::~Booster() {
  if (handle_ != nullptr) {
    XGBoosterFree(handle_);
  }
}

std::vector<float> Booster::predict(const ColumnInfo& columns, DenseView x) const {
  DMatrix d(columns, x);
  const bst_ulong* shape = nullptr;
  bst_ulong dim = 0;
  const float* out = nullptr;
  const char* cfg =
      R"({"type":1,"training":false,"iteration_begin":0,"iteration_end":0,"strict_shape":false})";
  check(XGBoosterPredictFromDMatrix(handle_, d.get(), cfg, &shape, &dim, &out), "predict");
  // The output buffer belongs to the booster and this thread: copy before the next call.
  return std::vector<float>(out, out + x.rows);
}

std::string Booster::save() const {
  bst_ulong len = 0;
  const char* data = nullptr;
  check(XGBoosterSaveModelToBuffer(handle_, R"({"format":"ubj"})", &len, &data), "save model");
  return std::string(data, len);
}

std::string Booster::dump_trees_json() const {
  bst_ulong n = 0;
  const char** trees = nullptr;
  check(XGBoosterDumpModelEx(handle_, "", 1, "json", &n, &trees), "dump model");
  std::string out = "[";
  for (bst_ulong i = 0; i < n; ++i) {
    if (i > 0) {
      out += ",";
    }
    out += trees[i];
  }
  out += "]";
  return out;
}

void Booster::set_attr(const std::string& key, const std::string& value) {
  check(XGBoosterSetAttr(handle_, key.c_str(), value.c_str()), "set attr");
}

std::optional<std::string> Booster::attr(const std::string& key) const {
  const char* out = nullptr;
  int success = 0;
  check(XGBoosterGetAttr(handle_, key.c_str(), &out, &success), "get attr");
  if (success == 0 || out == nullptr) {
    return std::nullopt;
  }
  return std::string(out);
}

std::vector<std::pair<std::string, double>> Booster::gain_importance(
    const ColumnInfo& columns) const {
  bst_ulong n_features = 0;
  const char** features = nullptr;
  bst_ulong dim = 0;
  const bst_ulong* shape = nullptr;
  const float* scores = nullptr;
  check(XGBoosterFeatureScore(handle_, R"({"importance_type":"gain"})", &n_features, &features,
                              &dim, &shape, &scores),
        "feature score");
  std::vector<std::pair<std::string, double>> out;
  double total = 0;
  for (bst_ulong i = 0; i < n_features; ++i) {
    total += scores[i];
  }
  for (bst_ulong i = 0; i < n_features; ++i) {
    // Models loaded from bytes report columns as "f<index>".
    std::string name = features[i];
    if (name.size() > 1 && name[0] == 'f') {
      std::size_t idx = std::strtoul(name.c_str() + 1, nullptr, 10);
      if (idx < columns.names.size()) {
        name = columns.names[idx];
      }
    }
    out.emplace_back(name, total > 0 ? scores[i] / total : 0.0);
  }
  return out;
}

int64_t Booster::num_boosted_rounds() const {
  int rounds = 0;
  check(XGBoosterBoostedRounds(handle_, &rounds), "boosted rounds");
  return rounds;
}

}  // namespace llmd::model
