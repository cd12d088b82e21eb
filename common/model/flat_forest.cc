#include "common/model/flat_forest.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <system_error>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace llmd::model {
namespace {

using nlohmann::json;
using Node = FlatForest::Node;

// XGBoost's OutOfRangeCat(): the first float that cannot name a category. Values at or above it
// (and negative values) are invalid categories and go left.
constexpr float kMaxCategory = 16777216.0f;
// Prepared rows live on the stack of predict_margins(): 32 KiB, at most kMaxGroups groups.
constexpr std::size_t kBufferFloats = 8192;
constexpr std::size_t kMaxGroups = 8;
// Below this many rows, padding a group of kLanes costs more than walking rows one by one.
constexpr std::size_t kMinGroupRows = 3;

// Objectives whose ProbToMargin() is the identity in XGBoost 1.7, so the stored base_score is
// already the margin the predictor starts from. (reg:logistic etc. would need XGBoost's exact
// float transform; they are rejected rather than approximated.)
constexpr std::array<std::string_view, 5> kIdentityObjectives = {
    "reg:squarederror", "reg:linear", "reg:squaredlogerror", "reg:pseudohubererror",
    "reg:absoluteerror"};

[[noreturn]] void fail(const std::string& what) { throw ModelError("flat forest: " + what); }

const json& member(const json& obj, std::string_view key, std::string_view where) {
  if (!obj.is_object()) {
    fail(fmt::format("{} is not an object", where));
  }
  auto it = obj.find(key);
  if (it == obj.end()) {
    fail(fmt::format("{} has no '{}'", where, key));
  }
  return *it;
}

std::string_view string_of(const json& v, std::string_view what) {
  if (!v.is_string()) {
    fail(fmt::format("{} is not a string", what));
  }
  return v.get_ref<const std::string&>();
}

int64_t int_of(const json& v, std::string_view what) {
  if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(fmt::format("{} is out of range", what));
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    return v.get<int64_t>();
  }
  fail(fmt::format("{} is not an integer", what));
}

// XGBoost stores its scalar parameters as decimal strings.
int64_t int_param(const json& v, std::string_view what) {
  std::string_view s = string_of(v, what);
  int64_t out = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc{} || end != s.data() + s.size()) {
    fail(fmt::format("{} '{}' is not an integer", what, s));
  }
  return out;
}

std::vector<int64_t> int_array(const json& tree, std::string_view key, std::size_t n) {
  const json& arr = member(tree, key, "tree");
  if (!arr.is_array() || arr.size() != n) {
    fail(fmt::format("tree '{}' is not an array of {} integers", key, n));
  }
  std::vector<int64_t> out;
  out.reserve(n);
  for (const json& v : arr) {
    out.push_back(int_of(v, key));
  }
  return out;
}

std::vector<float> float_array(const json& tree, std::string_view key, std::size_t n) {
  const json& arr = member(tree, key, "tree");
  if (!arr.is_array() || arr.size() != n) {
    fail(fmt::format("tree '{}' is not an array of {} numbers", key, n));
  }
  std::vector<float> out;
  out.reserve(n);
  for (const json& v : arr) {
    if (!v.is_number()) {
      fail(fmt::format("tree '{}' holds a non-number", key));
    }
    // UBJSON float32 values arrive as doubles holding the exact float; the cast is lossless.
    out.push_back(static_cast<float>(v.get<double>()));
  }
  return out;
}

// One tree of the model JSON, checked and ready to be laid out.
struct RawTree {
  std::size_t n = 0;
  std::vector<int64_t> left;
  std::vector<int64_t> right;
  std::vector<int64_t> feature;
  std::vector<float> cond;
  std::vector<int64_t> default_left;
  std::vector<int64_t> split_type;  // all 0 when the tree has no split_type array
  // Categories that go right, per node (only nodes listed in categories_nodes).
  std::vector<std::vector<uint32_t>> cats;
  // XGBoost's RegTree::HasCategoricalSplit(): the tree owns any category storage.
  bool has_category_storage = false;
};

RawTree read_tree(const json& tree) {
  RawTree t;
  int64_t n = int_param(member(member(tree, "tree_param", "tree"), "num_nodes", "tree_param"),
                        "num_nodes");
  if (n < 1 || n > std::numeric_limits<int32_t>::max()) {
    fail(fmt::format("tree has {} nodes", n));
  }
  t.n = static_cast<std::size_t>(n);
  t.left = int_array(tree, "left_children", t.n);
  t.right = int_array(tree, "right_children", t.n);
  t.feature = int_array(tree, "split_indices", t.n);
  t.cond = float_array(tree, "split_conditions", t.n);
  t.default_left = int_array(tree, "default_left", t.n);
  t.cats.resize(t.n);
  if (!tree.contains("split_type")) {
    // Like XGBoost's loader: no split_type array means an all-numeric tree.
    t.split_type.assign(t.n, 0);
    return t;
  }
  t.split_type = int_array(tree, "split_type", t.n);
  const json& nodes = member(tree, "categories_nodes", "tree");
  const json& segments = member(tree, "categories_segments", "tree");
  const json& sizes = member(tree, "categories_sizes", "tree");
  const json& categories = member(tree, "categories", "tree");
  if (!nodes.is_array() || !segments.is_array() || !sizes.is_array() || !categories.is_array() ||
      segments.size() != nodes.size() || sizes.size() != nodes.size()) {
    fail("tree category arrays are inconsistent");
  }
  // XGBoost's RegTree::LoadCategoricalSplit() walks the nodes in id order with a cursor into
  // categories_nodes; replicate that walk so that any listing resolves exactly as it does there.
  std::size_t cursor = 0;
  int64_t next = nodes.empty() ? -1 : int_of(nodes[0], "categories_nodes");
  for (std::size_t nid = 0; nid < t.n; ++nid) {
    if (static_cast<int64_t>(nid) != next) {
      continue;
    }
    int64_t begin = int_of(segments[cursor], "categories_segments");
    int64_t size = int_of(sizes[cursor], "categories_sizes");
    if (size < 1 || begin < 0 || begin > static_cast<int64_t>(categories.size()) ||
        size > static_cast<int64_t>(categories.size()) - begin) {
      fail(fmt::format("node {} has a bad category segment", nid));
    }
    for (int64_t k = begin; k < begin + size; ++k) {
      int64_t c = int_of(categories[static_cast<std::size_t>(k)], "categories");
      if (c < 0 || c >= static_cast<int64_t>(kMaxCategory)) {
        fail(fmt::format("node {} lists category {}", nid, c));
      }
      t.cats[nid].push_back(static_cast<uint32_t>(c));
    }
    t.has_category_storage = true;
    ++cursor;
    next = cursor == nodes.size() ? -1 : int_of(nodes[cursor], "categories_nodes");
  }
  return t;
}

// Compiles trees into the forest's arrays, sharing derived columns between nodes that make the
// same decision.
class Compiler {
 public:
  explicit Compiler(std::size_t num_features) : num_features_(num_features) {}

  // Lays out the nodes reachable from the root breadth first, children of a node in adjacent
  // slots, so that right = left + 1 and the tree's top levels share cache lines.
  FlatForest::Tree add_tree(const RawTree& t, std::vector<Node>& nodes,
                            std::vector<float>& leaf_values) {
    const std::size_t base = nodes.size();
    if (base + t.n > static_cast<std::size_t>(std::numeric_limits<int32_t>::max())) {
      fail("model has too many nodes");
    }
    std::vector<int64_t> placed(t.n, -1);  // new index per original node id
    std::vector<uint32_t> depth(t.n, 0);
    std::vector<std::size_t> order;  // original ids in layout order
    order.reserve(t.n);
    order.push_back(0);
    placed[0] = static_cast<int64_t>(base);
    uint32_t max_depth = 0;
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t id = order[k];
      const int64_t l = t.left[id];
      if (l == -1) {
        max_depth = std::max(max_depth, depth[id]);
        continue;
      }
      const int64_t r = t.right[id];
      // XGBoost's numeric step is LeftChild() + !(f < split): it assumes right == left + 1.
      if (l < 1 || r != l + 1 || r >= static_cast<int64_t>(t.n)) {
        fail(fmt::format("node {} has children {} and {}", id, l, r));
      }
      for (int64_t c : {l, r}) {
        if (placed[static_cast<std::size_t>(c)] != -1) {
          fail(fmt::format("node {} is reached twice", c));
        }
        placed[static_cast<std::size_t>(c)] = static_cast<int64_t>(base + order.size());
        depth[static_cast<std::size_t>(c)] = depth[id] + 1;
        order.push_back(static_cast<std::size_t>(c));
      }
    }
    for (const std::size_t id : order) {
      const auto self = static_cast<int32_t>(placed[id]);
      if (t.left[id] == -1) {
        // The constant-0 column and split 1 send the walk "left" onto the leaf itself.
        nodes.push_back(Node{1.0f, kLeafColumn, self});
        leaf_values.push_back(t.cond[id]);
        continue;
      }
      const uint32_t col = decision_column(t, id);
      // A derived 0/1 column is 1 where the row goes right: split between the two.
      const float split = col >= 2 * num_features_ ? 0.5f : t.cond[id];
      nodes.push_back(Node{split, col, static_cast<int32_t>(placed[t.left[id]])});
      leaf_values.push_back(0.0f);
    }
    return FlatForest::Tree{static_cast<uint32_t>(base), max_depth};
  }

  // Prepared column count once all trees are added; resolves kLeafColumn in `nodes`.
  std::size_t finish(std::vector<Node>& nodes) const {
    const std::size_t width = 2 * num_features_ + derived_.size() + 1;
    for (Node& nd : nodes) {
      const uint32_t col = nd.col == kLeafColumn ? static_cast<uint32_t>(width - 1) : nd.col;
      nd.col = col * FlatForest::kLanes;
    }
    return width;
  }

  std::vector<FlatForest::Derived>& derived() { return derived_; }
  std::vector<uint32_t>& pool() { return pool_; }

 private:
  static constexpr uint32_t kLeafColumn = std::numeric_limits<uint32_t>::max();

  // The prepared column whose !(value < split) reproduces XGBoost's decision at node `id`.
  uint32_t decision_column(const RawTree& t, std::size_t id) {
    const int64_t f = t.feature[id];
    if (f < 0 || f >= static_cast<int64_t>(num_features_)) {
      fail(fmt::format("node {} splits on feature {} of {}", id, f, num_features_));
    }
    if ((t.default_left[id] != 0 && t.default_left[id] != 1) ||
        (t.split_type[id] != 0 && t.split_type[id] != 1)) {
      fail(fmt::format("node {} has bad flags", id));
    }
    const auto feature = static_cast<uint32_t>(f);
    const bool default_left = t.default_left[id] == 1;
    // Categorical only when the tree owns category storage: otherwise XGBoost evaluates the
    // node as numeric with its (NaN) split condition.
    if (t.split_type[id] == 1 && t.has_category_storage) {
      // Bitset of the categories that go right, sized by the largest one like XGBoost's, so
      // that larger categories fall outside it and go left (empty: every value goes left).
      std::vector<uint32_t> bits;
      for (uint32_t c : t.cats[id]) {
        if (bits.size() <= c / 32) {
          bits.resize(c / 32 + 1, 0);
        }
        bits[c / 32] |= 1u << (c % 32);
      }
      return derived_column(feature, true, default_left ? 0 : 1, std::move(bits));
    }
    const float split = t.cond[id];
    if (!default_left) {
      // Raw column: NaN fails `<`, so it goes right, the default.
      return feature;
    }
    if (split > -std::numeric_limits<float>::infinity()) {
      // NaN-as--inf column: a missing value goes left, a present one compares as itself.
      return static_cast<uint32_t>(num_features_) + feature;
    }
    // A NaN or -inf split sends every present value right: a "present?" column.
    return derived_column(feature, false, 0, {});
  }

  uint32_t derived_column(uint32_t feature, bool categorical, uint32_t missing_value,
                          std::vector<uint32_t> bits) {
    auto key = std::make_tuple(feature, categorical, missing_value, bits);
    auto it = columns_.find(key);
    if (it != columns_.end()) {
      return it->second;
    }
    FlatForest::Derived d{feature, categorical ? 1u : 0u, missing_value,
                          static_cast<uint32_t>(bits.size()), static_cast<uint32_t>(pool_.size())};
    pool_.insert(pool_.end(), bits.begin(), bits.end());
    const auto col = static_cast<uint32_t>(2 * num_features_ + derived_.size());
    derived_.push_back(d);
    columns_.emplace(std::move(key), col);
    return col;
  }

  std::size_t num_features_;
  std::vector<FlatForest::Derived> derived_;
  std::vector<uint32_t> pool_;
  std::map<std::tuple<uint32_t, bool, uint32_t, std::vector<uint32_t>>, uint32_t> columns_;
};

// XGBoost's common::Decision() for a present value: right iff the value is a valid category
// (0 <= v < 2^24; -0.0 is category 0, -0.5 is invalid) whose truncation is in the bitset.
bool category_goes_right(const uint32_t* bits, uint32_t words, float f) {
  if (!(f >= 0.0f) || f >= kMaxCategory) {
    return false;
  }
  const auto c = static_cast<uint32_t>(f);
  if (c / 32 >= words) {
    return false;
  }
  return ((bits[c / 32] >> (c % 32)) & 1u) != 0;
}

// Walks one tree for the kLanes rows of a prepared group; returns nothing but the leaves.
// The lanes' walks are independent, so the CPU overlaps their load chains.
inline void walk_group(const Node* nodes, const FlatForest::Tree& tree, const float* group,
                       uint32_t* leaves) {
  std::array<uint32_t, FlatForest::kLanes> idx;
  idx.fill(tree.root);
  for (uint32_t d = 0; d < tree.depth; ++d) {
#pragma GCC unroll 8
    for (uint32_t k = 0; k < FlatForest::kLanes; ++k) {
      const Node& nd = nodes[idx[k]];
      // Widening col first lets the lane offset fold into the load's displacement.
      idx[k] = static_cast<uint32_t>(nd.left) + !(group[std::size_t{nd.col} + k] < nd.split);
    }
  }
  std::copy(idx.begin(), idx.end(), leaves);
}

}  // namespace

FlatForest FlatForest::from_model_bytes(std::string_view ubj_bytes) {
  json root;
  try {
    root = json::from_ubjson(ubj_bytes);
  } catch (const json::exception& e) {
    throw ModelError(std::string("flat forest: model bytes are not UBJSON: ") + e.what());
  }
  try {
    const json& version = member(root, "version", "model");
    if (!version.is_array() || version.empty() || int_of(version[0], "version") != 1) {
      fail("only XGBoost 1.x models are supported");
    }
    const json& learner = member(root, "learner", "model");
    const json& booster = member(learner, "gradient_booster", "learner");
    std::string_view booster_name = string_of(member(booster, "name", "gradient_booster"), "name");
    if (booster_name != "gbtree") {
      fail(fmt::format("booster '{}' is not supported (gbtree only)", booster_name));
    }
    std::string_view objective =
        string_of(member(member(learner, "objective", "learner"), "name", "objective"), "name");
    if (std::find(kIdentityObjectives.begin(), kIdentityObjectives.end(), objective) ==
        kIdentityObjectives.end()) {
      fail(fmt::format("objective '{}' is not supported", objective));
    }

    const json& mparam = member(learner, "learner_model_param", "learner");
    FlatForest out;
    int64_t num_feature = int_param(member(mparam, "num_feature", "learner_model_param"),
                                    "num_feature");
    if (num_feature < 1 || num_feature > static_cast<int64_t>(kBufferFloats)) {
      fail(fmt::format("model has {} features", num_feature));
    }
    out.num_features_ = static_cast<std::size_t>(num_feature);
    if (int_param(member(mparam, "num_class", "learner_model_param"), "num_class") > 1) {
      fail("multi-class models are not supported");
    }
    if (mparam.contains("num_target") && int_param(mparam["num_target"], "num_target") != 1) {
      fail("multi-target models are not supported");
    }
    // XGBoost writes the shortest decimal that round-trips the float and reads it back with a
    // correctly rounded parser; from_chars is correctly rounded too.
    std::string_view base = string_of(member(mparam, "base_score", "learner_model_param"),
                                      "base_score");
    auto [end, ec] = std::from_chars(base.data(), base.data() + base.size(), out.base_score_);
    if (ec != std::errc{} || end != base.data() + base.size()) {
      fail(fmt::format("base_score '{}' is not a float", base));
    }

    const json& model = member(booster, "model", "gradient_booster");
    const json& trees = member(model, "trees", "model");
    const json& tree_info = member(model, "tree_info", "model");
    if (!trees.is_array() || !tree_info.is_array() || tree_info.size() != trees.size()) {
      fail("trees and tree_info disagree");
    }
    const json& gparam = member(model, "gbtree_model_param", "model");
    if (int_param(member(gparam, "num_trees", "gbtree_model_param"), "num_trees") !=
        static_cast<int64_t>(trees.size())) {
      fail("num_trees disagrees with the tree list");
    }
    if (gparam.contains("size_leaf_vector") &&
        int_param(gparam["size_leaf_vector"], "size_leaf_vector") != 0) {
      fail("vector leaves are not supported");
    }
    for (const json& g : tree_info) {
      if (int_of(g, "tree_info") != 0) {
        fail("trees of output groups other than 0 are not supported");
      }
    }
    out.trees_.reserve(trees.size());
    Compiler compiler(out.num_features_);
    for (const json& tree : trees) {
      if (tree.contains("tree_param")) {
        const json& tp = tree["tree_param"];
        if (tp.contains("size_leaf_vector") &&
            int_param(tp["size_leaf_vector"], "size_leaf_vector") != 0) {
          fail("vector leaves are not supported");
        }
      }
      out.trees_.push_back(compiler.add_tree(read_tree(tree), out.nodes_, out.leaf_values_));
    }
    out.width_ = compiler.finish(out.nodes_);
    if (out.width_ * kLanes > kBufferFloats) {
      fail(fmt::format("model needs {} prepared columns, at most {} are supported", out.width_,
                       kBufferFloats / kLanes));
    }
    out.derived_ = std::move(compiler.derived());
    out.cat_pool_ = std::move(compiler.pool());
    out.nodes_.shrink_to_fit();
    out.leaf_values_.shrink_to_fit();
    return out;
  } catch (const json::exception& e) {
    throw ModelError(std::string("flat forest: malformed model: ") + e.what());
  }
}

void FlatForest::prepare(const float* row, float* group, uint32_t lane) const noexcept {
  const std::size_t nf = num_features_;
  float* g = group + lane;
  for (std::size_t c = 0; c < nf; ++c) {
    const float v = row[c];
    g[c * kLanes] = v;
    g[(nf + c) * kLanes] = v != v ? -std::numeric_limits<float>::infinity() : v;
  }
  const std::size_t first = 2 * nf;
  for (std::size_t d = 0; d < derived_.size(); ++d) {
    const Derived& dv = derived_[d];
    const float v = row[dv.feature];
    uint32_t right = 1;  // a present value, for the "present?" test
    if (v != v) {
      right = dv.missing_value;
    } else if (dv.categorical != 0) {
      right = category_goes_right(cat_pool_.data() + dv.offset, dv.words, v) ? 1 : 0;
    }
    g[(first + d) * kLanes] = static_cast<float>(right);
  }
  g[(width_ - 1) * kLanes] = 0.0f;
}

float FlatForest::predict_margin(const float* row) const noexcept {
  // Only lane 0 of the group is written and read.
  alignas(64) std::array<float, kBufferFloats> group;
  prepare(row, group.data(), 0);
  const Node* nodes = nodes_.data();
  float acc = base_score_;
  for (const Tree& tree : trees_) {
    uint32_t idx = tree.root;
    for (uint32_t d = 0; d < tree.depth; ++d) {
      const Node& nd = nodes[idx];
      idx = static_cast<uint32_t>(nd.left) + !(group[nd.col] < nd.split);
    }
    acc += leaf_values_[idx];
  }
  return acc;
}

void FlatForest::predict_margins(const float* rows, std::size_t n, float* out) const noexcept {
  if (n < kMinGroupRows) {
    for (std::size_t r = 0; r < n; ++r) {
      out[r] = predict_margin(rows + r * num_features_);
    }
    return;
  }
  const std::size_t group_floats = width_ * kLanes;
  const std::size_t block_rows = std::min(kMaxGroups, kBufferFloats / group_floats) * kLanes;
  alignas(64) std::array<float, kBufferFloats> buf;
  std::array<float, kMaxGroups * kLanes> acc;
  std::array<uint32_t, kLanes> leaves;
  const Node* nodes = nodes_.data();
  const float* leaf_values = leaf_values_.data();
  // Trees outer, rows inner: one tree's nodes stay in L1 while the block's rows walk it. Per
  // row the sum is still base_score + tree 0 + tree 1 + ... in float, XGBoost's order.
  for (std::size_t b = 0; b < n; b += block_rows) {
    const std::size_t m = std::min(block_rows, n - b);
    const std::size_t groups = (m + kLanes - 1) / kLanes;
    for (std::size_t r = 0; r < groups * kLanes; ++r) {
      // Lanes past the last row repeat it; their results are dropped.
      const float* src = rows + std::min(b + r, n - 1) * num_features_;
      prepare(src, buf.data() + (r / kLanes) * group_floats, static_cast<uint32_t>(r % kLanes));
      acc[r] = base_score_;
    }
    for (const Tree& tree : trees_) {
      for (std::size_t g = 0; g < groups; ++g) {
        walk_group(nodes, tree, buf.data() + g * group_floats, leaves.data());
        for (uint32_t k = 0; k < kLanes; ++k) {
          acc[g * kLanes + k] += leaf_values[leaves[k]];
        }
      }
    }
    std::copy(acc.begin(), acc.begin() + static_cast<std::ptrdiff_t>(m), out + b);
  }
}

}  // namespace llmd::model
