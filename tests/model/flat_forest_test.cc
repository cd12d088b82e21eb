#include "common/model/flat_forest.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/features/schema.h"
#include "common/model/booster.h"
#include "common/model/latency_model.h"

namespace llmd::model {
namespace {

using nlohmann::json;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Bit-for-bit comparison; reports the first few differing rows.
void expect_same_bits(const std::vector<float>& want, const std::vector<float>& got,
                      const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::bit_cast<uint32_t>(want[i]) != std::bit_cast<uint32_t>(got[i])) {
      if (++mismatches <= 5) {
        ADD_FAILURE() << what << ": row " << i << " xgboost " << want[i] << " flat " << got[i];
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << want.size() << " rows";
}

// Test columns: numeric ones with different value shapes, and categorical ones with their
// category counts (the schema's 4 prefill buckets and 3 pod types, and a wide one whose
// partition splits list categories >= 32, i.e. multi-word bitsets).
struct Schema {
  ColumnInfo info;
  std::vector<int> categories;  // per column; 0 = numeric
};

Schema test_schema() {
  Schema s;
  auto add = [&](std::string name, int cats) {
    s.info.names.push_back(std::move(name));
    s.info.categorical.push_back(cats > 0);
    s.categories.push_back(cats);
  };
  add("continuous", 0);
  add("integer", 0);  // small integers: split conditions coincide with data values
  add("signed", 0);
  add("sparse", 0);  // mostly missing
  add("prefill_score_bucket", 4);
  add("pod_type_cat", 3);
  add("wide_cat", 40);
  return s;
}

// Training rows: valid categories or NaN (XGBoost refuses invalid categories when training).
// Evaluation rows (`wild`) add what a server may see: categories out of range, negative,
// fractional, huge; numeric -0.0 and extreme values.
std::vector<float> draw_rows(const Schema& s, std::size_t n, bool wild, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const std::vector<float> odd_categories = {7.0f,  -1.0f, 2.5f,        -0.5f,      -0.0f, 3.999f,
                                             0.5f,  31.0f, 32.0f,       33.0f,      39.5f, 40.0f,
                                             64.0f, 1e9f,  16777215.0f, 16777216.0f};
  const std::vector<float> odd_numbers = {-0.0f, 0.0f, 1e30f, -1e30f, 1e-40f, 20.0f, 3.0f};
  const std::size_t cols = s.categories.size();
  std::vector<float> x(n * cols);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t c = 0; c < cols; ++c) {
      float v = 0.0f;
      const int cats = s.categories[c];
      if (cats > 0) {
        v = static_cast<float>(std::uniform_int_distribution<int>(0, cats - 1)(rng));
        if (wild && u(rng) < 0.3f) {
          v = odd_categories[rng() % odd_categories.size()];
        }
      } else if (c == 0) {
        v = u(rng) * 100.0f;
      } else if (c == 1) {
        v = static_cast<float>(std::uniform_int_distribution<int>(0, 20)(rng));
      } else {
        v = (u(rng) - 0.5f) * 1000.0f;
      }
      if (cats == 0 && wild && u(rng) < 0.05f) {
        v = odd_numbers[rng() % odd_numbers.size()];
      }
      const float missing = c == 3 ? 0.7f : 0.1f;
      if (u(rng) < missing) {
        v = kNaN;
      }
      x[i * cols + c] = v;
    }
  }
  return x;
}

std::vector<float> draw_labels(const Schema& s, const std::vector<float>& x, std::mt19937_64& rng) {
  const std::size_t cols = s.categories.size();
  const std::size_t n = x.size() / cols;
  std::normal_distribution<float> noise(0.0f, 2.0f);
  std::vector<float> y(n);
  auto val = [](float v, float dflt) { return std::isnan(v) ? dflt : v; };
  for (std::size_t i = 0; i < n; ++i) {
    const float* r = &x[i * cols];
    float t = 0.3f * val(r[0], 40.0f) + 2.0f * val(r[1], 3.0f) + 0.01f * val(r[2], 0.0f) +
              (std::isnan(r[3]) ? -4.0f : 0.02f * r[3]);
    const float bucket[] = {0.0f, 6.0f, -5.0f, 11.0f};
    const float pod[] = {3.0f, -7.0f, 9.0f};
    t += std::isnan(r[4]) ? 1.0f : bucket[static_cast<int>(r[4])];
    t += std::isnan(r[5]) ? -2.0f : pod[static_cast<int>(r[5])];
    t += std::isnan(r[6]) ? 0.0f : static_cast<float>((static_cast<int>(r[6]) * 7) % 13) - 6.0f;
    y[i] = t + noise(rng);
  }
  return y;
}

struct Config {
  std::string name;
  int trees;
  int depth;
  double base_score;
  double learning_rate = 0.05;
  double subsample = 0.8;
  double colsample = 0.8;
};

class FlatForestMatchesXgboost : public ::testing::TestWithParam<Config> {};

TEST_P(FlatForestMatchesXgboost, BitForBit) {
  const Config& cfg = GetParam();
  const Schema s = test_schema();
  std::mt19937_64 rng(std::hash<std::string>{}(cfg.name));
  const std::size_t cols = s.categories.size();
  const std::size_t n_train = 3000;
  std::vector<float> x = draw_rows(s, n_train, false, rng);
  std::vector<float> y = draw_labels(s, x, rng);
  TrainParams p;
  p.num_trees = cfg.trees;
  p.max_depth = cfg.depth;
  p.learning_rate = cfg.learning_rate;
  p.subsample = cfg.subsample;
  p.colsample_bytree = cfg.colsample;
  p.threads = 1;
  p.seed = rng() % 1000000;
  Booster trained = Booster::train(p, s.info, {x.data(), n_train, cols}, y, cfg.base_score);
  const std::string bytes = trained.save();
  Booster loaded = Booster::load(bytes);
  FlatForest forest = FlatForest::from_model_bytes(bytes);
  EXPECT_EQ(forest.num_features(), cols);
  EXPECT_EQ(forest.num_trees(), static_cast<std::size_t>(cfg.trees));
  EXPECT_EQ(forest.base_score(), static_cast<float>(cfg.base_score));

  const std::size_t n = 4000;
  std::vector<float> rows = draw_rows(s, n, true, rng);
  const std::vector<float> want = trained.predict(s.info, {rows.data(), n, cols});
  expect_same_bits(want, loaded.predict(s.info, {rows.data(), n, cols}), "reloaded booster");

  std::vector<float> got(n);
  forest.predict_margins(rows.data(), n, got.data());
  expect_same_bits(want, got, "predict_margins, one batch");

  // Batch sizes around the lane group (8) and block (64) boundaries, and below the
  // single-row cut-over.
  std::vector<float> chunked(n);
  const std::size_t sizes[] = {1, 2, 3, 5, 8, 9, 15, 16, 17, 63, 64, 65, 100, 127, 128, 129, 200};
  for (std::size_t start = 0, k = 0; start < n; ++k) {
    const std::size_t len = std::min(sizes[k % std::size(sizes)], n - start);
    forest.predict_margins(rows.data() + start * cols, len, chunked.data() + start);
    start += len;
  }
  expect_same_bits(want, chunked, "predict_margins, chunked");

  std::vector<float> single(n);
  for (std::size_t i = 0; i < n; ++i) {
    single[i] = forest.predict_margin(rows.data() + i * cols);
  }
  expect_same_bits(want, single, "predict_margin");
}

INSTANTIATE_TEST_SUITE_P(Models, FlatForestMatchesXgboost,
                         ::testing::Values(Config{"stump", 1, 1, 10.0, 0.3, 1.0, 1.0},
                                           Config{"many_shallow", 300, 2, 3.7},
                                           Config{"production_shape", 200, 6, 10.0},
                                           Config{"deep", 60, 8, 0.0, 0.1},
                                           Config{"full_columns", 40, 4, 3.7, 0.2, 1.0, 1.0},
                                           Config{"negative_base", 120, 5, -12.25, 0.1, 0.9, 0.5}),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return info.param.name;
                         });

// The published path: a TargetModel on the real feature schema, serialized and reloaded.
TEST(FlatForestTest, MatchesTargetModelAfterSerializeLoadRoundTrip) {
  const features::FeatureSet set = features::FeatureSet::kTtft;
  const std::size_t cols = features::columns(set).size();
  std::mt19937_64 rng(20240611);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto draw_input = [&] {
    features::FeatureInput in;
    in.kv_cache_percentage = u(rng);
    in.input_token_length = static_cast<int64_t>(u(rng) * 4000);
    in.num_request_waiting = u(rng) < 0.5 ? 0 : static_cast<int64_t>(u(rng) * 20);
    in.num_request_running = static_cast<int64_t>(u(rng) * 30);
    in.num_tokens_generated = static_cast<int64_t>(u(rng) * 500);
    in.prefix_cache_score = u(rng);
    const features::PodType pods[] = {features::PodType::kNone, features::PodType::kPrefill,
                                      features::PodType::kDecode, features::PodType::kUnknown};
    in.pod_type = pods[rng() % 4];
    in.prefill_tokens_in_flight = static_cast<int64_t>(u(rng) * 8000);
    in.decode_tokens_in_flight = static_cast<int64_t>(u(rng) * 8000);
    return in;
  };
  const std::size_t n_train = 4000;
  std::vector<float> x(n_train * cols);
  std::vector<float> y(n_train);
  for (std::size_t i = 0; i < n_train; ++i) {
    features::FeatureInput in = draw_input();
    features::fill_row(in, set, &x[i * cols]);
    y[i] = static_cast<float>(
        20.0 + 0.05 * static_cast<double>(in.input_token_length) * (1.0 - in.prefix_cache_score) +
        15.0 * static_cast<double>(in.num_request_waiting) +
        (in.pod_type == features::PodType::kPrefill ? 30.0 : 0.0) + 10.0 * u(rng));
  }
  TrainParams p;
  p.threads = 1;
  const ColumnInfo info = column_info(set);
  TargetModel model(Booster::train(p, info, {x.data(), n_train, cols}, y, 37.5), set,
                    OutputTransform{}, Objective::kMean);
  const std::string bytes = model.serialize(42);
  TargetModelPtr loaded = TargetModel::load(bytes);
  FlatForest forest = FlatForest::from_model_bytes(bytes);
  ASSERT_EQ(forest.num_features(), cols);
  ASSERT_EQ(forest.num_trees(), 200u);

  const std::size_t n = 3000;
  std::vector<features::FeatureInput> inputs;
  std::vector<float> rows(n * cols);
  for (std::size_t i = 0; i < n; ++i) {
    inputs.push_back(draw_input());
    features::fill_row(inputs.back(), set, &rows[i * cols]);
  }
  std::vector<float> got(n);
  forest.predict_margins(rows.data(), n, got.data());
  expect_same_bits(loaded->predict_margin(inputs), got, "TargetModel::predict_margin");

  // Raw rows with out-of-range categories, through the reloaded booster itself.
  const std::size_t bucket = 11;  // prefill_score_bucket in the ttft column order
  const std::size_t pod = 12;     // pod_type_cat
  ASSERT_EQ(info.names[bucket], "prefill_score_bucket");
  ASSERT_EQ(info.names[pod], "pod_type_cat");
  const float odd[] = {7.0f, -1.0f, 2.5f, -0.5f, 3.0f, kNaN, 0.0f, 100.0f};
  for (std::size_t i = 0; i < n; ++i) {
    rows[i * cols + bucket] = odd[i % std::size(odd)];
    rows[i * cols + pod] = odd[(i / std::size(odd)) % std::size(odd)];
  }
  forest.predict_margins(rows.data(), n, got.data());
  expect_same_bits(loaded->booster().predict(info, {rows.data(), n, cols}), got, "odd categories");
}

// --- Hand-built trees for the corner cases training rarely produces --------------------------

// Sentinels for split conditions that JSON text cannot carry; XGBoost's JSON reader accepts
// the NaN / Infinity tokens they are replaced with.
constexpr double kSentinelNaN = 1.5e300;
constexpr double kSentinelInf = 2.5e300;

struct NodeSpec {
  int left = -1;  // -1: leaf; the right child is left + 1
  int feature = 0;
  double cond = 0.0;  // split condition, or leaf value
  bool default_left = false;
  bool categorical = false;
  bool listed = false;          // has an entry in categories_nodes
  std::vector<int> categories;  // that go right
};

NodeSpec leaf(double value) {
  NodeSpec s;
  s.cond = value;
  return s;
}

NodeSpec numeric(int left, int feature, double cond, bool default_left) {
  NodeSpec s;
  s.left = left;
  s.feature = feature;
  s.cond = cond;
  s.default_left = default_left;
  return s;
}

// `listed` false: a split_type-1 node without an entry in categories_nodes (XGBoost loads and
// predicts such trees but cannot save them).
NodeSpec categorical(int left, int feature, bool default_left, std::vector<int> categories,
                     bool listed = true) {
  NodeSpec s = numeric(left, feature, kSentinelNaN, default_left);
  s.categorical = true;
  s.listed = listed;
  s.categories = std::move(categories);
  return s;
}

json make_tree(int id, const std::vector<NodeSpec>& nodes) {
  const auto n = static_cast<int>(nodes.size());
  json t;
  std::vector<int> lefts, rights, parents(n, 2147483647), features, dl, types;
  std::vector<double> conds;
  std::vector<int> cat_nodes, cat_segments, cat_sizes, cats;
  for (int i = 0; i < n; ++i) {
    const NodeSpec& s = nodes[i];
    lefts.push_back(s.left);
    rights.push_back(s.left == -1 ? -1 : s.left + 1);
    if (s.left != -1) {
      parents[s.left] = i;
      parents[s.left + 1] = i;
    }
    features.push_back(s.feature);
    conds.push_back(s.cond);
    dl.push_back(s.default_left ? 1 : 0);
    types.push_back(s.categorical ? 1 : 0);
    if (s.categorical && s.listed) {
      cat_nodes.push_back(i);
      cat_segments.push_back(static_cast<int>(cats.size()));
      cat_sizes.push_back(static_cast<int>(s.categories.size()));
      cats.insert(cats.end(), s.categories.begin(), s.categories.end());
    }
  }
  t["id"] = id;
  t["left_children"] = lefts;
  t["right_children"] = rights;
  t["parents"] = parents;
  t["split_indices"] = features;
  t["split_conditions"] = conds;
  t["default_left"] = dl;
  t["split_type"] = types;
  t["categories_nodes"] = cat_nodes;
  t["categories_segments"] = cat_segments;
  t["categories_sizes"] = cat_sizes;
  t["categories"] = cats;
  t["base_weights"] = std::vector<double>(n, 0.0);
  t["loss_changes"] = std::vector<double>(n, 0.0);
  t["sum_hessian"] = std::vector<double>(n, 1.0);
  t["tree_param"] = {{"num_deleted", "0"},
                     {"num_feature", "2"},
                     {"num_nodes", std::to_string(n)},
                     {"size_leaf_vector", "0"}};
  return t;
}

const ColumnInfo kTwoColumns{{"a", "b"}, {true, false}};

// A 2-feature model with the given trees, as XGBoost model JSON text (special split
// conditions as NaN / Infinity tokens) and as the same model in UBJSON (written by nlohmann).
struct Crafted {
  std::string text;
  std::string ubj;
};

Crafted craft(const std::vector<json>& trees, double base_score) {
  std::vector<float> x = {0, 0, 1, 1, 2, 0, 3, 1};
  std::vector<float> y = {1, 2, 3, 4};
  TrainParams p;
  p.num_trees = 1;
  json model =
      json::from_ubjson(Booster::train(p, kTwoColumns, {x.data(), 4, 2}, y, base_score).save());
  json& gb = model["learner"]["gradient_booster"]["model"];
  gb["trees"] = trees;
  gb["tree_info"] = std::vector<int>(trees.size(), 0);
  gb["gbtree_model_param"]["num_trees"] = std::to_string(trees.size());
  Crafted out;
  out.text = model.dump();
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (std::size_t pos = out.text.find(from); pos != std::string::npos;
         pos = out.text.find(from)) {
      out.text.replace(pos, from.size(), to);
    }
  };
  replace_all("-2.5e+300", "-Infinity");
  replace_all("2.5e+300", "Infinity");
  replace_all("1.5e+300", "NaN");
  for (json& tree : gb["trees"]) {
    for (json& c : tree["split_conditions"]) {
      const double v = c.get<double>();
      if (v == kSentinelNaN) {
        c = std::numeric_limits<double>::quiet_NaN();
      } else if (std::abs(v) == kSentinelInf) {
        c = std::copysign(std::numeric_limits<double>::infinity(), v);
      }
    }
  }
  std::vector<uint8_t> ubj = json::to_ubjson(model);
  out.ubj.assign(ubj.begin(), ubj.end());
  return out;
}

// Every pair of interesting values for the two features. (No infinities: XGBoost refuses them
// as input.)
std::vector<float> value_grid() {
  const std::vector<float> v = {-1e9f, -1.0f,  -0.5f,       -0.0f,       0.0f,  0.5f,   1.0f,
                                1.5f,  1.999f, 2.0f,        2.5f,        3.0f,  3.999f, 7.0f,
                                31.0f, 31.5f,  32.0f,       33.0f,       40.0f, 40.5f,  41.0f,
                                64.0f, 100.0f, 16777215.0f, 16777216.0f, 3e9f,  kNaN};
  std::vector<float> rows;
  for (float a : v) {
    for (float b : v) {
      rows.push_back(a);
      rows.push_back(b);
    }
  }
  return rows;
}

void expect_grid_matches(const Booster& booster, const FlatForest& forest,
                         const std::string& what) {
  const std::vector<float> rows = value_grid();
  const std::size_t n = rows.size() / 2;
  std::vector<float> got(n);
  forest.predict_margins(rows.data(), n, got.data());
  expect_same_bits(booster.predict(kTwoColumns, {rows.data(), n, 2}), got, what);
  for (std::size_t i = 0; i < n; ++i) {
    got[i] = forest.predict_margin(&rows[2 * i]);
  }
  expect_same_bits(booster.predict(kTwoColumns, {rows.data(), n, 2}), got, what + ", single");
}

TEST(FlatForestTest, CategoricalAndSpecialSplitsMatchXgboost) {
  std::vector<json> trees;
  // Categorical splits (lists = categories that go RIGHT): one word, two words (40), and
  // 2^24 - 1, the largest category.
  trees.push_back(
      make_tree(0, {categorical(1, 0, false, {1, 3}), categorical(3, 1, true, {0, 40}),
                    categorical(5, 1, false, {2}), leaf(0.125), leaf(0.25), leaf(0.5), leaf(1.0)}));
  trees.push_back(make_tree(1, {categorical(1, 0, true, {0, 16777215}), leaf(2.0), leaf(4.0)}));
  // Numeric splits at NaN, +-inf and -0.0 with both default directions.
  trees.push_back(make_tree(
      2, {numeric(1, 0, -kSentinelInf, true), numeric(3, 1, kSentinelNaN, true),
          numeric(5, 1, kSentinelInf, false), leaf(32.0), leaf(64.0), leaf(128.0), leaf(256.0)}));
  trees.push_back(make_tree(3, {numeric(1, 1, -0.0, true), numeric(3, 0, kSentinelInf, true),
                                numeric(5, 0, kSentinelNaN, false), leaf(512.0), leaf(1024.0),
                                leaf(2048.0), leaf(4096.0)}));
  trees.push_back(make_tree(4, {numeric(1, 0, 2.0, false), leaf(-0.75), leaf(0.0625)}));
  const Crafted model = craft(trees, 3.7);
  Booster booster = Booster::load(model.text);
  // XGBoost's own bytes for the model, which kept the special split conditions.
  const std::string bytes = booster.save();
  const json saved = json::from_ubjson(bytes);
  const json& conds = saved["learner"]["gradient_booster"]["model"]["trees"][2]["split_conditions"];
  ASSERT_TRUE(std::isinf(conds[0].get<double>()) && conds[0].get<double>() < 0);
  ASSERT_TRUE(std::isnan(conds[1].get<double>()));
  ASSERT_TRUE(std::isinf(conds[2].get<double>()) && conds[2].get<double>() > 0);
  expect_grid_matches(booster, FlatForest::from_model_bytes(bytes), "xgboost bytes");
  expect_grid_matches(booster, FlatForest::from_model_bytes(model.ubj), "nlohmann bytes");
}

// Trees XGBoost loads and predicts with but cannot save: a categorical node without a category
// list in a tree that has lists (every present value goes left), and split_type 1 in a tree
// without any list (XGBoost then compares with the node's NaN split: present goes right).
TEST(FlatForestTest, UnlistedCategoricalNodesMatchXgboost) {
  const Crafted model =
      craft({make_tree(0, {categorical(1, 0, false, {1}), categorical(3, 1, false, {}, false),
                           categorical(5, 1, true, {}, false), leaf(1.0), leaf(2.0), leaf(4.0),
                           leaf(8.0)}),
             make_tree(1, {categorical(1, 1, true, {}, false), leaf(16.0), leaf(32.0)}),
             make_tree(2, {categorical(1, 0, false, {}, false), leaf(64.0), leaf(128.0)})},
            0.0);
  expect_grid_matches(Booster::load(model.text), FlatForest::from_model_bytes(model.ubj),
                      "unlisted categorical nodes");
}

// Categories: the node's list holds the categories that go RIGHT; anything else that is
// present (invalid, negative, unlisted) goes LEFT regardless of default_left.
TEST(FlatForestTest, CategoryDirectionFollowsXgboost) {
  const Crafted model =
      craft({make_tree(0, {categorical(1, 0, false, {2}), leaf(-1.0), leaf(1.0)})}, 0.0);
  FlatForest forest = FlatForest::from_model_bytes(Booster::load(model.text).save());
  auto margin = [&](float a) {
    const float row[] = {a, 0.0f};
    return forest.predict_margin(row);
  };
  EXPECT_EQ(margin(2.0f), 1.0f);    // listed -> right
  EXPECT_EQ(margin(2.5f), 1.0f);    // truncates to 2
  EXPECT_EQ(margin(1.0f), -1.0f);   // unlisted -> left
  EXPECT_EQ(margin(-1.0f), -1.0f);  // invalid -> left, although the default is right
  EXPECT_EQ(margin(-0.5f), -1.0f);
  EXPECT_EQ(margin(7.0f), -1.0f);
  EXPECT_EQ(margin(kNaN), 1.0f);  // missing -> default (right)
}

TEST(FlatForestTest, ConcurrentCallsAgree) {
  const Schema s = test_schema();
  std::mt19937_64 rng(5);
  const std::size_t cols = s.categories.size();
  std::vector<float> x = draw_rows(s, 1000, false, rng);
  std::vector<float> y = draw_labels(s, x, rng);
  TrainParams p;
  p.num_trees = 50;
  FlatForest forest = FlatForest::from_model_bytes(
      Booster::train(p, s.info, {x.data(), 1000, cols}, y, 1.0).save());
  const std::size_t n = 500;
  std::vector<float> rows = draw_rows(s, n, true, rng);
  std::vector<float> want(n);
  forest.predict_margins(rows.data(), n, want.data());
  std::vector<std::vector<float>> got(4, std::vector<float>(n));
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        forest.predict_margins(rows.data(), n, got[t].data());
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  for (const auto& g : got) {
    expect_same_bits(want, g, "concurrent");
  }
}

// --- Rejections --------------------------------------------------------------------------------

std::string small_model_bytes() {
  std::vector<float> x;
  std::vector<float> y;
  for (int i = 0; i < 50; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(i % 7));
    y.push_back(static_cast<float>(i % 10));
  }
  TrainParams p;
  p.num_trees = 2;
  p.min_child_weight = 0;
  p.gamma = 0;
  p.subsample = 1.0;
  return Booster::train(p, {{"a", "b"}, {false, false}}, {x.data(), 50, 2}, y, 2.0).save();
}

// Re-saves the model after `edit` through XGBoost, so the bytes are ones XGBoost accepts.
std::string edited_model(const std::function<void(json&)>& edit) {
  json model = json::from_ubjson(small_model_bytes());
  edit(model);
  return Booster::load(model.dump()).save();
}

TEST(FlatForestTest, RejectsGarbage) {
  EXPECT_THROW(FlatForest::from_model_bytes(""), ModelError);
  EXPECT_THROW(FlatForest::from_model_bytes("not a model at all"), ModelError);
  EXPECT_THROW(FlatForest::from_model_bytes(R"({"learner": {}})"), ModelError);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 50; ++i) {
    std::string junk(64 + rng() % 512, '\0');
    for (char& c : junk) {
      c = static_cast<char>(rng());
    }
    EXPECT_THROW(FlatForest::from_model_bytes(junk), ModelError);
  }
  const std::string good = small_model_bytes();
  EXPECT_NO_THROW(FlatForest::from_model_bytes(good));
  for (std::size_t cut : {good.size() / 4, good.size() / 2, good.size() - 1}) {
    EXPECT_THROW(FlatForest::from_model_bytes(good.substr(0, cut)), ModelError) << cut;
  }
  // Valid UBJSON that is not a model.
  std::vector<uint8_t> other =
      json::to_ubjson(json{{"learner", {{"x", 1}}}, {"version", {1, 7, 4}}});
  EXPECT_THROW(FlatForest::from_model_bytes(std::string(other.begin(), other.end())), ModelError);
}

TEST(FlatForestTest, RejectsNonTreeBoosters) {
  const std::string linear = edited_model([](json& m) {
    m["learner"]["gradient_booster"] =
        json::parse(R"({"name": "gblinear", "model": {"weights": [0.5, -0.25, 1.0]}})");
  });
  EXPECT_THROW(FlatForest::from_model_bytes(linear), ModelError);
  const std::string dart = edited_model([](json& m) {
    json inner = m["learner"]["gradient_booster"];
    m["learner"]["gradient_booster"] = {
        {"name", "dart"}, {"gbtree", inner}, {"weight_drop", {1.0, 1.0}}};
  });
  EXPECT_THROW(FlatForest::from_model_bytes(dart), ModelError);
}

TEST(FlatForestTest, RejectsObjectivesWithTransformedBaseScore) {
  const std::string logistic = edited_model([](json& m) {
    m["learner"]["objective"] =
        json::parse(R"({"name": "reg:logistic", "reg_loss_param": {"scale_pos_weight": "1"}})");
    m["learner"]["learner_model_param"]["base_score"] = "5E-1";
  });
  EXPECT_THROW(FlatForest::from_model_bytes(logistic), ModelError);
}

TEST(FlatForestTest, RejectsMalformedTrees) {
  json model = json::from_ubjson(small_model_bytes());
  auto bytes_of = [](const json& m) {
    std::vector<uint8_t> b = json::to_ubjson(m);
    return std::string(b.begin(), b.end());
  };
  EXPECT_NO_THROW(FlatForest::from_model_bytes(bytes_of(model)));
  json& tree = model["learner"]["gradient_booster"]["model"]["trees"][0];
  ASSERT_NE(tree["left_children"][0].get<int>(), -1) << "test needs a split at the root";
  {
    json m = model;  // children not adjacent
    json& t = m["learner"]["gradient_booster"]["model"]["trees"][0];
    t["right_children"][0] = t["left_children"][0].get<int>();
    EXPECT_THROW(FlatForest::from_model_bytes(bytes_of(m)), ModelError);
  }
  {
    json m = model;  // split on a feature the model does not have
    m["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"][0] = 2;
    EXPECT_THROW(FlatForest::from_model_bytes(bytes_of(m)), ModelError);
  }
  {
    json m = model;  // a cycle back to the root
    json& t = m["learner"]["gradient_booster"]["model"]["trees"][0];
    t["left_children"][0] = 0;
    t["right_children"][0] = 1;
    EXPECT_THROW(FlatForest::from_model_bytes(bytes_of(m)), ModelError);
  }
  {
    json m = model;  // array shorter than num_nodes
    m["learner"]["gradient_booster"]["model"]["trees"][0]["split_conditions"].erase(0);
    EXPECT_THROW(FlatForest::from_model_bytes(bytes_of(m)), ModelError);
  }
  {
    json m = model;  // two output groups
    m["learner"]["learner_model_param"]["num_class"] = "2";
    EXPECT_THROW(FlatForest::from_model_bytes(bytes_of(m)), ModelError);
  }
}

}  // namespace
}  // namespace llmd::model
