#include "common/model/flat_forest.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <set>
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
// Prepared rows live on the stack of the predict calls (32 KiB; no allocation per call): a
// block of at most kMaxGroups groups, so a prepared row has at most kMaxColumns columns.
constexpr std::size_t kBufferFloats = 8192;
constexpr std::size_t kMaxGroups = 8;
constexpr std::size_t kMaxColumns = kBufferFloats / FlatForest::kLanes;
// Up to this many distinct categorical decisions get prepared columns; beyond (features with
// many categories) preparing every row would cost more than testing bitsets during the walk.
constexpr std::size_t kMaxDerivedCategorical = 128;
// Below this many rows, padding a group of kLanes costs more than walking rows one by one.
constexpr std::size_t kMinGroupRows = 3;

// Objectives whose ProbToMargin() is the identity in XGBoost 1.7, so the stored base_score is
// already the margin the predictor starts from. (reg:logistic etc. would need XGBoost's exact
// float transform; they are rejected rather than approximated.)
constexpr std::array<std::string_view, 5> kIdentityObjectives = {
    "reg:squarederror", "reg:linear", "reg:squaredlogerror", "reg:pseudohubererror",
    "reg:absoluteerror"};

[[noreturn]] void fail(const std::string& what) {
  throw ModelError("flat forest: " + what);
}

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
  if (v.is_boolean()) {  // default_left, should a writer use booleans
    return v.get<bool>() ? 1 : 0;
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
  int64_t n =
      int_param(member(member(tree, "tree_param", "tree"), "num_nodes", "tree_param"), "num_nodes");
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

using CategoryKey = std::tuple<uint32_t, uint32_t, std::vector<uint32_t>>;

bool is_categorical_split(const RawTree& t, std::size_t id) {
  // Categorical only when the tree owns category storage: otherwise XGBoost evaluates the
  // node as numeric with its (NaN) split condition.
  return t.left[id] != -1 && t.split_type[id] == 1 && t.has_category_storage;
}

// Bitset of the categories that go right, sized by the largest one like XGBoost's, so that
// larger categories fall outside it and go left (empty list: every present value goes left).
std::vector<uint32_t> category_bits(const std::vector<uint32_t>& categories) {
  std::vector<uint32_t> bits;
  for (uint32_t c : categories) {
    if (bits.size() <= c / 32) {
      bits.resize(c / 32 + 1, 0);
    }
    bits[c / 32] |= 1u << (c % 32);
  }
  return bits;
}

// (feature, default right, bitset) of a categorical node.
CategoryKey category_key(const RawTree& t, std::size_t id) {
  return {static_cast<uint32_t>(t.feature[id]), t.default_left[id] == 1 ? 0u : 1u,
          category_bits(t.cats[id])};
}

// Compiles trees into the forest's arrays, sharing derived columns between nodes that make the
// same decision.
class Compiler {
 public:
  Compiler(std::size_t num_features, bool inline_categories)
      : num_features_(num_features), inline_categories_(inline_categories) {}

  // Lays out the nodes reachable from the root breadth first, children of a node in adjacent
  // slots (left, right), so that the tree's top levels share cache lines.
  FlatForest::Tree add_tree(const RawTree& t, std::vector<Node>& nodes,
                            std::vector<float>& leaf_values) {
    const std::size_t base = nodes.size();
    if (base + t.n >= static_cast<std::size_t>(std::numeric_limits<int32_t>::max())) {
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
      if (t.left[id] == -1) {
        nodes.push_back(Node{1.0f, kLeafColumn, static_cast<uint32_t>(placed[id]) + 1});
        leaf_values.push_back(t.cond[id]);
        continue;
      }
      Node nd = decision(t, id);
      nd.right = static_cast<uint32_t>(placed[static_cast<std::size_t>(t.right[id])]);
      nodes.push_back(nd);
      leaf_values.push_back(0.0f);
    }
    return FlatForest::Tree{static_cast<uint32_t>(base), max_depth};
  }

  // Column count once all trees are added: resolves the symbolic columns and scales all by
  // kLanes. Sets `raw_first` (0 when unused).
  std::size_t finish(std::vector<Node>& nodes, std::size_t& raw_first) const {
    const std::size_t derived_end = 2 * num_features_ + derived_.size();
    raw_first = inline_categories_ ? derived_end : 0;
    const std::size_t width = derived_end + (inline_categories_ ? num_features_ : 0) + 1;
    if (width > kMaxColumns) {
      fail(fmt::format("model needs {} prepared columns, at most {} are supported", width,
                       kMaxColumns));
    }
    for (Node& nd : nodes) {
      uint32_t col = nd.col;
      if (col == kLeafColumn) {
        col = static_cast<uint32_t>(width - 1);
      } else if ((col & kRawColumn) != 0) {
        col = static_cast<uint32_t>(raw_first + (col & ~kRawColumn)) * FlatForest::kLanes |
              FlatForest::kInlineCategorical;
        nd.col = col;
        continue;
      }
      nd.col = col * FlatForest::kLanes;
    }
    return width;
  }

  std::vector<FlatForest::Derived>& derived() { return derived_; }
  std::vector<uint32_t>& pool() { return pool_; }

 private:
  // Symbolic columns until finish(): the constant-0 column, and raw feature | kRawColumn.
  static constexpr uint32_t kLeafColumn = std::numeric_limits<uint32_t>::max();
  static constexpr uint32_t kRawColumn = 1u << 30;

  // The internal node whose comparison (or inline category test) reproduces XGBoost's
  // decision at node `id`; `right` is filled in by the caller.
  Node decision(const RawTree& t, std::size_t id) {
    const int64_t f = t.feature[id];
    if (f < 0 || f >= static_cast<int64_t>(num_features_)) {
      fail(fmt::format("node {} splits on feature {} of {}", id, f, num_features_));
    }
    if ((t.default_left[id] != 0 && t.default_left[id] != 1) ||
        (t.split_type[id] != 0 && t.split_type[id] != 1)) {
      fail(fmt::format("node {} has bad flags", id));
    }
    const auto feature = static_cast<uint32_t>(f);
    const uint32_t default_right = t.default_left[id] == 1 ? 0 : 1;
    // A derived 0/1 column is 1 where the row goes right: split between the two.
    constexpr float kDerivedSplit = 0.5f;
    if (is_categorical_split(t, id)) {
      auto [key_feature, key_default, bits] = category_key(t, id);
      if (inline_categories_) {
        const auto offset = static_cast<uint32_t>(pool_.size());
        pool_.push_back(static_cast<uint32_t>(bits.size()));
        pool_.push_back(key_default);
        pool_.insert(pool_.end(), bits.begin(), bits.end());
        return Node{std::bit_cast<float>(offset), feature | kRawColumn, 0};
      }
      return Node{kDerivedSplit, derived_column(key_feature, true, key_default, std::move(bits)),
                  0};
    }
    const float split = t.cond[id];
    if (split != split) {
      // !(f < NaN) holds for every present value: present goes right, missing by default.
      return Node{kDerivedSplit, derived_column(feature, false, default_right, {}), 0};
    }
    if (default_right == 1) {
      // NaN-as-+inf column: +inf < split fails for every non-NaN split, so missing goes right.
      return Node{split, feature, 0};
    }
    if (split > -std::numeric_limits<float>::infinity()) {
      // NaN-as--inf column: -inf < split, so a missing value goes left.
      return Node{split, static_cast<uint32_t>(num_features_) + feature, 0};
    }
    // Split -inf, default left: present goes right, missing left.
    return Node{kDerivedSplit, derived_column(feature, false, 0, {}), 0};
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
  bool inline_categories_;
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

// Slow path of a step: a categorical node testing its bitset; `entry` is [words, default
// right, bits...].
[[gnu::noinline]] uint32_t inline_category_left(const uint32_t* entry, float v) {
  if (v != v) {
    return entry[1] == 0 ? 1 : 0;
  }
  return category_goes_right(entry + 2, entry[0], v) ? 0 : 1;
}

// One step of the walk from node `idx` for the row whose prepared values start at `values`.
// No NaN reaches the comparison, so `!(v >= split)` equals `v < split` (go left) and compiles
// to a carry-flag test feeding a subtract-with-borrow: left = right - 1.
template <bool kInline>
inline uint32_t step(const Node* nodes, const uint32_t* pool, uint32_t idx, const float* values) {
  const Node* nd = nodes + idx;
  const uint32_t col = nd->col;
  const uint32_t right = nd->right;
  if constexpr (kInline) {
    if ((col & FlatForest::kInlineCategorical) != 0) {
      const float v = values[std::size_t{col & ~FlatForest::kInlineCategorical}];
      return right - inline_category_left(pool + std::bit_cast<uint32_t>(nd->split), v);
    }
  }
  // Widening col lets a lane offset fold into the load's displacement.
  return right - static_cast<uint32_t>(!(values[std::size_t{col}] >= nd->split));
}

// Walks kTrees consecutive trees for the kLanes rows of one prepared group and writes their
// leaves (tree-major). The walks are independent, so the CPU overlaps their load chains: 16
// chains hide the latency of a step (node load, value load, compare), and since all chains
// read the same group, every lane address is the group pointer plus a constant.
template <bool kInline, std::size_t kTrees>
inline void walk_group(const Node* nodes, const uint32_t* pool, const FlatForest::Tree* trees,
                       const float* group, uint32_t* leaves) {
  constexpr std::size_t kChains = kTrees * FlatForest::kLanes;
  std::array<uint32_t, kChains> idx;
  uint32_t depth = 0;
  for (std::size_t t = 0; t < kTrees; ++t) {
    // The first step reads the same node for every lane: load it once. (A single-leaf root
    // works too: its comparison keeps every lane on it.)
    const Node root = nodes[trees[t].root];
    if (kInline && (root.col & FlatForest::kInlineCategorical) != 0) {
      std::fill_n(idx.begin() + t * FlatForest::kLanes, FlatForest::kLanes, trees[t].root);
      depth = std::max(depth, trees[t].depth);
      continue;
    }
    for (std::size_t k = 0; k < FlatForest::kLanes; ++k) {
      idx[t * FlatForest::kLanes + k] =
          root.right - static_cast<uint32_t>(!(group[std::size_t{root.col} + k] >= root.split));
    }
    // Leaves absorb extra steps, so the deeper tree sets the count.
    depth = std::max(depth, trees[t].depth > 0 ? trees[t].depth - 1 : 0);
  }
  for (uint32_t d = 0; d < depth; ++d) {
#pragma GCC unroll 16
    for (std::size_t k = 0; k < kChains; ++k) {
      idx[k] = step<kInline>(nodes, pool, idx[k], group + k % FlatForest::kLanes);
    }
  }
  std::copy(idx.begin(), idx.end(), leaves);
}

// Adds every tree's leaf to acc[0, groups * kLanes), trees in order.
template <bool kInline>
void walk_block(const Node* nodes, const uint32_t* pool, const float* leaf_values,
                const std::vector<FlatForest::Tree>& trees, const float* buf,
                std::size_t group_floats, std::size_t groups, float* acc) {
  constexpr std::size_t kL = FlatForest::kLanes;
  std::array<uint32_t, 2 * kL> leaves;
  std::size_t t = 0;
  for (; t + 2 <= trees.size(); t += 2) {
    for (std::size_t g = 0; g < groups; ++g) {
      walk_group<kInline, 2>(nodes, pool, &trees[t], buf + g * group_floats, leaves.data());
      // Tree t's leaf before tree t + 1's: XGBoost's order of float additions.
      for (std::size_t k = 0; k < kL; ++k) {
        acc[g * kL + k] += leaf_values[leaves[k]];
        acc[g * kL + k] += leaf_values[leaves[kL + k]];
      }
    }
  }
  if (t < trees.size()) {
    for (std::size_t g = 0; g < groups; ++g) {
      walk_group<kInline, 1>(nodes, pool, &trees[t], buf + g * group_floats, leaves.data());
      for (std::size_t k = 0; k < kL; ++k) {
        acc[g * kL + k] += leaf_values[leaves[k]];
      }
    }
  }
}

template <bool kInline>
float walk_row(const Node* nodes, const uint32_t* pool, const float* leaf_values,
               const std::vector<FlatForest::Tree>& trees, const float* group, float acc) {
  for (const FlatForest::Tree& tree : trees) {
    uint32_t idx = tree.root;
    for (uint32_t d = 0; d < tree.depth; ++d) {
      idx = step<kInline>(nodes, pool, idx, group);
    }
    acc += leaf_values[idx];
  }
  return acc;
}

}  // namespace

FlatForest FlatForest::from_model_bytes(std::string_view ubj_bytes) {
  json root;
  try {
    root = json::from_ubjson(ubj_bytes);
  } catch (const std::exception& e) {  // parse errors, and allocation failures on junk sizes
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
    int64_t num_feature =
        int_param(member(mparam, "num_feature", "learner_model_param"), "num_feature");
    if (num_feature < 1 || num_feature > static_cast<int64_t>(kMaxColumns)) {
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
    std::string_view base =
        string_of(member(mparam, "base_score", "learner_model_param"), "base_score");
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

    std::vector<RawTree> raw;
    raw.reserve(trees.size());
    std::set<CategoryKey> category_decisions;
    for (const json& tree : trees) {
      if (tree.contains("tree_param")) {
        const json& tp = tree["tree_param"];
        if (tp.contains("size_leaf_vector") &&
            int_param(tp["size_leaf_vector"], "size_leaf_vector") != 0) {
          fail("vector leaves are not supported");
        }
      }
      raw.push_back(read_tree(tree));
      const RawTree& t = raw.back();
      for (std::size_t id = 0; id < t.n && category_decisions.size() <= kMaxDerivedCategorical;
           ++id) {
        if (is_categorical_split(t, id)) {
          category_decisions.insert(category_key(t, id));
        }
      }
    }
    Compiler compiler(out.num_features_, category_decisions.size() > kMaxDerivedCategorical);
    out.trees_.reserve(raw.size());
    for (const RawTree& t : raw) {
      out.trees_.push_back(compiler.add_tree(t, out.nodes_, out.leaf_values_));
    }
    out.width_ = compiler.finish(out.nodes_, out.raw_first_);
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
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::size_t nf = num_features_;
  float* g = group + lane;
  for (std::size_t c = 0; c < nf; ++c) {
    const float v = row[c];
    const bool missing = v != v;
    g[c * kLanes] = missing ? kInf : v;
    g[(nf + c) * kLanes] = missing ? -kInf : v;
  }
  const std::size_t first = 2 * nf;
  for (std::size_t d = 0; d < derived_.size(); ++d) {
    const Derived& dv = derived_[d];
    const float v = row[dv.feature];
    uint32_t right = 1;
    if (v != v) {
      right = dv.missing_value;
    } else if (dv.categorical != 0) {
      right = category_goes_right(cat_pool_.data() + dv.offset, dv.words, v) ? 1 : 0;
    }
    g[(first + d) * kLanes] = static_cast<float>(right);
  }
  if (raw_first_ != 0) {
    for (std::size_t c = 0; c < nf; ++c) {
      g[(raw_first_ + c) * kLanes] = row[c];
    }
  }
  g[(width_ - 1) * kLanes] = 0.0f;
}

float FlatForest::predict_one(const float* row, float* group) const noexcept {
  prepare(row, group, 0);
  if (raw_first_ != 0) {
    return walk_row<true>(nodes_.data(), cat_pool_.data(), leaf_values_.data(), trees_, group,
                          base_score_);
  }
  return walk_row<false>(nodes_.data(), cat_pool_.data(), leaf_values_.data(), trees_, group,
                         base_score_);
}

float FlatForest::predict_margin(const float* row) const noexcept {
  alignas(64) std::array<float, kBufferFloats> group;
  return predict_one(row, group.data());
}

void FlatForest::predict_margins(const float* rows, std::size_t n, float* out) const noexcept {
  alignas(64) std::array<float, kBufferFloats> buf;
  if (n < kMinGroupRows) {
    for (std::size_t r = 0; r < n; ++r) {
      out[r] = predict_one(rows + r * num_features_, buf.data());
    }
    return;
  }
  const std::size_t group_floats = width_ * kLanes;
  const std::size_t block_rows = std::min(kMaxGroups, kBufferFloats / group_floats) * kLanes;
  std::array<float, kMaxGroups * kLanes> acc;
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
    if (raw_first_ != 0) {
      walk_block<true>(nodes_.data(), cat_pool_.data(), leaf_values_.data(), trees_, buf.data(),
                       group_floats, groups, acc.data());
    } else {
      walk_block<false>(nodes_.data(), cat_pool_.data(), leaf_values_.data(), trees_, buf.data(),
                        group_floats, groups, acc.data());
    }
    std::copy(acc.begin(), acc.begin() + static_cast<std::ptrdiff_t>(m), out + b);
  }
}

}  // namespace llmd::model

namespace llmd::model {
namespace {

// One node of XGBoost's JSON dump schema (JsonGenerator, no stats), recursively; depth is
// bounded by the tree's own (checked) size.
json dump_node(const RawTree& t, std::size_t id, uint32_t depth,
               const std::vector<std::string>& names) {
  const int64_t left = t.left[id];
  if (left == -1) {
    return json{{"nodeid", id}, {"leaf", t.cond[id]}};
  }
  const auto l = static_cast<std::size_t>(left);
  const auto r = static_cast<std::size_t>(t.right[id]);
  if (l >= t.n || r >= t.n || l <= id || r <= id) {
    fail(fmt::format("node {} has children outside the tree", id));
  }
  const auto f = static_cast<std::size_t>(t.feature[id]);
  const std::string name = f < names.size() ? names[f] : "f" + std::to_string(f);
  const std::size_t missing = t.default_left[id] != 0 ? l : r;
  json node;
  if (is_categorical_split(t, id)) {
    // Listed categories go right, and XGBoost's dump calls that branch "yes".
    node =
        json{{"nodeid", id}, {"depth", depth}, {"split", name},     {"split_condition", t.cats[id]},
             {"yes", r},     {"no", l},        {"missing", missing}};
  } else {
    node =
        json{{"nodeid", id}, {"depth", depth}, {"split", name},     {"split_condition", t.cond[id]},
             {"yes", l},     {"no", r},        {"missing", missing}};
  }
  node["children"] =
      json::array({dump_node(t, l, depth + 1, names), dump_node(t, r, depth + 1, names)});
  return node;
}

}  // namespace

std::string dump_trees_json(std::string_view ubj_bytes, const std::vector<std::string>& names) {
  try {
    const json root = json::from_ubjson(ubj_bytes);
    const json& trees =
        member(member(member(member(root, "learner", "model"), "gradient_booster", "learner"),
                      "model", "gradient_booster"),
               "trees", "model");
    if (!trees.is_array()) {
      fail("trees is not an array");
    }
    json out = json::array();
    for (const json& tree : trees) {
      out.push_back(dump_node(read_tree(tree), 0, 0, names));
    }
    return out.dump();
  } catch (const json::exception& e) {
    throw ModelError(std::string("tree dump: malformed model: ") + e.what());
  }
}

}  // namespace llmd::model
