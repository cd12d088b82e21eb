#pragma once
// A compiled, allocation-free evaluator of XGBoost gbtree regression models.
//
// XGBoost's own predictor builds a DMatrix, a sparse page and per-thread feature vectors for
// every call; for the ~100-row batches of the prediction server that overhead dominates. A
// FlatForest reads the model's UBJSON bytes once and lays every tree out as one flat node array
// that a fixed-length, branch-free walk can evaluate.
//
// Exactness contract: predict_margin() returns, bit for bit, the margin (prediction type 1)
// XGBoost 1.7's CPU predictor returns for the same float row:
//   - numeric split: left iff fvalue < split_condition; NaN -> default child;
//   - categorical split (split_type 1): the node's category list holds the categories that go
//     RIGHT; a value goes right iff it is a valid category (0 <= v < 2^24, truncated toward
//     zero: 2.5 is category 2) listed for the node; invalid, unlisted and too-large values go
//     LEFT whatever default_left says; NaN -> default child;
//   - a tree without any category list evaluates its split_type-1 nodes as numeric splits (XGBoost
//     only consults the categorical path when the tree owns category storage);
//   - leaf value = split_conditions[leaf]; margin = float(base_score), then += each tree's leaf
//     value in float, in tree order.
//
// Immutable after construction: every method is const and safe to call from any thread.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/model/booster.h"

namespace llmd::model {

class FlatForest {
 public:
  // Compiles XGBoost's UBJSON model bytes (Booster::save(), TargetModel::serialize()). Throws
  // ModelError for bytes that are not such a model and for anything the evaluator cannot
  // reproduce exactly: non-gbtree boosters (gblinear, dart), multi-class or multi-target models,
  // objectives whose base score is not already a margin (e.g. reg:logistic), malformed trees,
  // and models too wide for the stack buffer (more than 1024 prepared columns, i.e. roughly
  // more than 300-500 features).
  static FlatForest from_model_bytes(std::string_view ubj_bytes);

  // `row` holds num_features() floats; NaN = missing.
  float predict_margin(const float* row) const noexcept;
  // `rows` is row-major, n x num_features(); writes n margins to `out`.
  void predict_margins(const float* rows, std::size_t n, float* out) const noexcept;

  std::size_t num_features() const { return num_features_; }
  std::size_t num_trees() const { return trees_.size(); }
  float base_score() const { return base_score_; }

  // Layout details, public only so that the helpers in flat_forest.cc can name them.
  //
  // Rows are first "prepared" so that a node's decision is one ordered float comparison, go
  // left iff value < split, with no NaN on either side. Prepared columns:
  //   [0, F)       the features with NaN replaced by +inf (default-right numeric splits);
  //   [F, 2F)      the features with NaN replaced by -inf (default-left numeric splits);
  //   [2F, 2F+K)   0/1 columns, 1 where the row goes right, one per distinct decision that no
  //                comparison expresses: categorical splits (feature, category set, default
  //                direction) and NaN splits;
  //   [2F+K, 3F+K) only when categorical decisions are too many to derive: the raw features,
  //                read by categorical nodes that then test their category bitset inline;
  //   last         a constant 0, compared by leaves so that they keep the walk in place.
  // Rows are interleaved in groups of kLanes: value (lane k, column c) is at
  // group[c * kLanes + k].
  static constexpr uint32_t kLanes = 8;
  // Marks `col` of a categorical node evaluated inline; `split` then holds the bit pattern of
  // the node's cat_pool_ offset ([words, default right, bitset words...]).
  static constexpr uint32_t kInlineCategorical = 1u << 31;
  struct alignas(16) Node {
    float split;
    uint32_t col;  // prepared column * kLanes, possibly | kInlineCategorical
    // Forest-wide index of the right child; left = right - 1. A leaf stores itself + 1: its
    // comparison (constant 0 < split 1) always goes "left", so extra steps stay on it.
    uint32_t right;
  };
  struct Tree {
    uint32_t root;
    // Longest root-to-leaf path: the number of walk steps.
    uint32_t depth;
  };
  // A prepared 0/1 column.
  struct Derived {
    uint32_t feature;
    uint32_t categorical;    // 0: every present value goes right; 1: category-set test
    uint32_t missing_value;  // 1 if a missing value goes right (the node's default)
    uint32_t words;          // category bitset: cat_pool_[offset, offset + words)
    uint32_t offset;
  };

 private:
  FlatForest() = default;
  // Writes the prepared columns of `row` for lane `lane` of `group`.
  void prepare(const float* row, float* group, uint32_t lane) const noexcept;
  // Margin of one row, prepared into lane 0 of `group` (a kBufferFloats scratch buffer).
  float predict_one(const float* row, float* group) const noexcept;

  // Every tree's nodes, breadth first; a node's two children are adjacent (left, right).
  std::vector<Node> nodes_;
  std::vector<float> leaf_values_;  // per node; 0 for internal nodes
  std::vector<Tree> trees_;
  std::vector<Derived> derived_;
  std::vector<uint32_t> cat_pool_;
  std::size_t num_features_ = 0;
  std::size_t width_ = 0;      // prepared columns
  std::size_t raw_first_ = 0;  // first raw column; 0 when categorical nodes are derived
  float base_score_ = 0.0f;
};

// XGBoost's JSON tree dump (one object per tree, the schema of XGBoosterDumpModelEx "json"
// without stats) of UBJSON model bytes, with `names` for the split features. XGBoost 1.7's own
// dump refuses models whose trees split a categorical column both ways ("f11 in feature map is
// categorical but tree node is numerical"), which the trainer's hist fits produce; this one
// follows the evaluation contract above (a tree without category storage splits numerically).
// Throws ModelError for bytes that are not such a model.
std::string dump_trees_json(std::string_view ubj_bytes, const std::vector<std::string>& names);

}  // namespace llmd::model
