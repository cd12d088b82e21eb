#pragma once
// RAII wrapper over the XGBoost C API; the only file that sees <xgboost/c_api.h> is booster.cc.
// Every C call is checked: a -1 return becomes ModelError carrying XGBGetLastError().
//
// Threading: predict() is safe to call concurrently on one booster (XGBoost >= 1.4 for tree
// models). train() builds a private booster; never mutate a booster that serves predictions:
// publish the bytes and load them into a new one.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace llmd::model {

struct ModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Row-major float matrix; NaN = missing.
struct DenseView {
  const float* data = nullptr;
  std::size_t rows = 0;
  std::size_t cols = 0;
};

struct ColumnInfo {
  std::vector<std::string> names;
  std::vector<bool> categorical;
  std::vector<int> monotone;  // per column: +1, -1 or 0 (none); empty = no constraints
};

// Contract hyper-parameters (predictor-api.md section 3.2).
struct TrainParams {
  int num_trees = 200;
  int max_depth = 6;
  double learning_rate = 0.05;
  double subsample = 0.8;
  double colsample_bytree = 0.8;
  double min_child_weight = 5;
  double gamma = 0.2;
  double reg_alpha = 0.01;
  double reg_lambda = 0.1;
  int threads = 1;
  uint64_t seed = 42;
  bool monotone = true;  // apply ColumnInfo::monotone (features::monotone_direction)
};

class Booster {
 public:
  // Squared-error regression of `labels` on `x`, starting from `base_score`, or from a margin
  // per row when `base_margin` is given (the trees then fit what it leaves; predict() does not
  // add it back: the caller does, as LinearBase does).
  static Booster train(const TrainParams& params, const ColumnInfo& columns, DenseView x,
                       std::span<const float> labels, double base_score,
                       std::span<const float> base_margin = {});
  // Loads XGBoost's own model bytes (JSON or UBJSON). Throws ModelError on bad bytes.
  static Booster load(std::string_view bytes);

  Booster(Booster&& other) noexcept;
  Booster& operator=(Booster&& other) noexcept;
  Booster(const Booster&) = delete;
  Booster& operator=(const Booster&) = delete;
  ~Booster();

  // Raw margin (sum of leaves + base score) per row, as XGBoost computes it.
  std::vector<float> predict(const ColumnInfo& columns, DenseView x) const;
  // XGBoost's own UBJSON model format (JSON text cannot carry the NaN split conditions of
  // categorical nodes).
  std::string save() const;
  // JSON array, one object per tree (XGBoost's dump schema).
  std::string dump_trees_json() const;
  void set_attr(const std::string& key, const std::string& value);
  std::optional<std::string> attr(const std::string& key) const;
  // Average gain per column name, normalised to sum 1 (columns never split on are absent).
  std::vector<std::pair<std::string, double>> gain_importance(const ColumnInfo& columns) const;
  int64_t num_boosted_rounds() const;

 private:
  explicit Booster(void* handle) : handle_(handle) {}
  void* handle_ = nullptr;
};

}  // namespace llmd::model
