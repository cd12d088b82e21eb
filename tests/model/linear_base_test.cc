#include "common/model/linear_base.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "common/model/flat_forest.h"
#include "common/model/latency_model.h"

namespace llmd::model {
namespace {

using features::Column;
using features::FeatureInput;
using features::FeatureSet;

std::size_t column_index(FeatureSet set, Column c) {
  auto cols = features::columns(set);
  for (std::size_t i = 0; i < cols.size(); ++i) {
    if (cols[i] == c) {
      return i;
    }
  }
  ADD_FAILURE() << "no column";
  return 0;
}

struct Data {
  std::vector<float> x;
  std::vector<float> y;
  std::size_t cols = 0;
};

// TTFT = 20 + 0.05 per queued prefill token + 0.1 per own prompt token, minus a *negative*
// slope in KV use that a physical server cannot have (the fit must hold it at 0).
Data draw(std::size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> noise(0, 2);
  Data d;
  d.cols = features::columns(FeatureSet::kTtft).size();
  for (std::size_t i = 0; i < n; ++i) {
    FeatureInput f;
    f.prefill_tokens_in_flight = static_cast<int64_t>(u(rng) * 4000);
    f.input_token_length = static_cast<int64_t>(100 + u(rng) * 900);
    f.kv_cache_percentage = u(rng);
    std::vector<float> row(d.cols);
    features::fill_row(f, FeatureSet::kTtft, row.data());
    d.x.insert(d.x.end(), row.begin(), row.end());
    d.y.push_back(static_cast<float>(20 + 0.05 * f.prefill_tokens_in_flight +
                                     0.1 * f.input_token_length - 30 * f.kv_cache_percentage +
                                     noise(rng)));
  }
  return d;
}

TEST(LinearBaseTest, RecoversSlopesAndHoldsEachToItsMonotoneSign) {
  Data d = draw(4000, 1);
  LinearBase b = fit_linear_base(FeatureSet::kTtft, {d.x.data(), d.y.size(), d.cols}, d.y, false);
  const auto in_flight = column_index(FeatureSet::kTtft, Column::kPrefillTokensInFlight);
  const auto kv = column_index(FeatureSet::kTtft, Column::kKvCachePercentage);
  const auto cat = column_index(FeatureSet::kTtft, Column::kPrefillScoreBucket);
  EXPECT_NEAR(b.coef[in_flight], 0.05, 0.005);
  EXPECT_EQ(b.coef[kv], 0.0) << "a longer KV never makes a pod faster: the slope is clamped";
  EXPECT_EQ(b.coef[cat], 0.0) << "categorical columns stay out of the linear part";
  // input_token_length and effective_input_tokens are equal here (no prefix): together 0.1.
  const double prompt = b.coef[column_index(FeatureSet::kTtft, Column::kInputTokenLength)] +
                        b.coef[column_index(FeatureSet::kTtft, Column::kEffectiveInputTokens)];
  EXPECT_NEAR(prompt, 0.1, 0.01);
  // Extrapolation: twice the largest queue in the data is predicted about twice as slow.
  std::vector<float> row(d.cols, 0.0f);
  row[in_flight] = 8000;
  EXPECT_GT(b.estimate_ms(row.data()), 380.0);
}

TEST(LinearBaseTest, LogMarginIsLog1pOfTheClippedEstimate) {
  LinearBase b;
  b.coef = {2.0};
  b.intercept = -5;
  b.log_margin = true;
  float row[] = {10.0f};
  EXPECT_FLOAT_EQ(b.margin(row), static_cast<float>(std::log1p(15.0)));
  row[0] = 1.0f;  // estimate -3 ms
  EXPECT_FLOAT_EQ(b.margin(row), 0.0f);
  row[0] = std::numeric_limits<float>::quiet_NaN();  // missing contributes nothing
  EXPECT_FLOAT_EQ(b.margin(row), 0.0f);
}

TEST(LinearBaseTest, JsonRoundTripAndRejections) {
  LinearBase b;
  b.coef = {0.5, 0, -1.25};
  b.intercept = 3.5;
  b.log_margin = true;
  LinearBase c = LinearBase::from_json(b.to_json(), 3);
  EXPECT_EQ(c.coef, b.coef);
  EXPECT_EQ(c.intercept, b.intercept);
  EXPECT_TRUE(c.log_margin);
  EXPECT_THROW(LinearBase::from_json(b.to_json(), 4), ModelError);
  EXPECT_THROW(LinearBase::from_json("{\"coef\": [1], \"intercept\": 1}", 1), ModelError);
  EXPECT_THROW(LinearBase::from_json("not json", 1), ModelError);
}

TEST(LinearBaseTest, ConstantColumnsGiveTheMean) {
  std::size_t cols = features::columns(FeatureSet::kTpot).size();
  std::vector<float> x(10 * cols, 1.0f);
  std::vector<float> y = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  LinearBase b = fit_linear_base(FeatureSet::kTpot, {x.data(), 10, cols}, y, false);
  EXPECT_DOUBLE_EQ(b.estimate_ms(x.data()), 5.5);
}

TEST(LinearBaseTest, TargetModelCarriesTheBaseThroughSerialization) {
  Data d = draw(600, 2);
  const auto info = column_info(FeatureSet::kTtft);
  LinearBase base =
      fit_linear_base(FeatureSet::kTtft, {d.x.data(), d.y.size(), d.cols}, d.y, false);
  std::vector<float> margins;
  for (std::size_t i = 0; i < d.y.size(); ++i) {
    margins.push_back(base.margin(&d.x[i * d.cols]));
  }
  TrainParams p;
  p.num_trees = 20;
  Booster booster = Booster::train(p, info, {d.x.data(), d.y.size(), d.cols}, d.y, 0.0, margins);
  TargetModel model(std::move(booster), FeatureSet::kTtft, OutputTransform{}, Objective::kMean, 0,
                    base);
  auto loaded = TargetModel::load(model.serialize(7));
  ASSERT_TRUE(loaded->linear_base().has_value());
  EXPECT_EQ(loaded->linear_base()->coef, base.coef);
  FeatureInput far;
  far.input_token_length = 500;
  far.prefill_tokens_in_flight = 12000;  // three times the training window
  FeatureInput near = far;
  near.prefill_tokens_in_flight = 4000;
  std::vector<FeatureInput> rows = {near, far};
  auto a = model.predict(rows);
  auto b = loaded->predict(rows);
  EXPECT_EQ(a, b);
  EXPECT_GT(b[1], b[0] + 300) << "the linear part extrapolates past the window";
}

}  // namespace
}  // namespace llmd::model

namespace llmd::model {
namespace {

// The reference's tree-dump route (the Go EPP's native-tree mode) must work for every model the
// trainer publishes, including those that split on the categorical prefill_score_bucket, which
// XGBoost 1.7's own dump refuses.
// Ours against XGBoost's own dump (with stats, and "f<i>" where ours names the column).
void expect_same_dump(const nlohmann::json& ours, const nlohmann::json& theirs,
                      const std::vector<std::string>& names) {
  if (theirs.is_array()) {
    ASSERT_EQ(ours.size(), theirs.size());
    for (std::size_t i = 0; i < theirs.size(); ++i) {
      expect_same_dump(ours[i], theirs[i], names);
    }
    return;
  }
  for (const auto& [key, value] : theirs.items()) {
    if (key == "cover" || key == "gain") {
      continue;  // stats: not part of the dump the route serves
    }
    ASSERT_TRUE(ours.contains(key)) << key << " in " << theirs.dump().substr(0, 200);
    if (key == "children") {
      expect_same_dump(ours[key], value, names);
    } else if (key == "split") {
      EXPECT_EQ(ours[key], names.at(std::stoul(value.get<std::string>().substr(1))));
    } else if (value.is_number_float()) {
      EXPECT_NEAR(ours[key].get<double>(), value.get<double>(),
                  1e-6 * (1 + std::abs(value.get<double>())))
          << key;
    } else {
      EXPECT_EQ(ours[key], value) << key;
    }
  }
}

TEST(TreeDump, MatchesXgboostOnNumericModelsAndDumpsCategoricalOnes) {
  const auto info = column_info(FeatureSet::kTtft);
  const std::size_t cols = info.names.size();
  std::vector<float> x, y_numeric, y_bucket;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 2000; ++i) {
    FeatureInput f;
    f.prefix_cache_score = u(rng);
    f.input_token_length = 100 + static_cast<int64_t>(u(rng) * 1000);
    f.num_request_waiting = static_cast<int64_t>(u(rng) * 5);
    std::vector<float> row(cols);
    features::fill_row(f, FeatureSet::kTtft, row.data());
    x.insert(x.end(), row.begin(), row.end());
    y_numeric.push_back(
        static_cast<float>(5 + 0.1 * f.input_token_length + 20 * f.num_request_waiting));
    // Depends on the bucket only: the trees must split on the categorical column.
    y_bucket.push_back(
        static_cast<float>(10 + 40 * features::prefill_score_bucket(f.prefix_cache_score)));
  }
  TrainParams p;
  p.num_trees = 5;
  ColumnInfo numeric_info = info;
  numeric_info.categorical.assign(cols, false);
  Booster numeric =
      Booster::train(p, numeric_info, {x.data(), y_numeric.size(), cols}, y_numeric, 0.0);
  expect_same_dump(nlohmann::json::parse(dump_trees_json(numeric.save(), info.names)),
                   nlohmann::json::parse(numeric.dump_trees_json()), info.names);

  Booster categorical = Booster::train(p, info, {x.data(), y_bucket.size(), cols}, y_bucket, 0.0);
  EXPECT_THROW(categorical.dump_trees_json(), ModelError) << "XGBoost 1.7's dump refuses it";
  const auto dump = nlohmann::json::parse(dump_trees_json(categorical.save(), info.names));
  ASSERT_EQ(dump.size(), 5u);
  EXPECT_NE(dump.dump().find("prefill_score_bucket"), std::string::npos);
  EXPECT_THROW(dump_trees_json("not a model", info.names), ModelError);
}

}  // namespace
}  // namespace llmd::model
