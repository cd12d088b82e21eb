#include "predictor/model_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/testing/synthetic_law.h"

namespace llmd::predictor {
namespace {

using features::FeatureInput;
using features::FeatureSet;

// A quantile-style model on a linear base, as the trainer publishes it with --linear-base.
model::TargetModel fit_on_base(FeatureSet set, uint64_t seed) {
  testing::SyntheticLaw law;
  law.inflight_signal = true;
  std::mt19937_64 rng(seed);
  const std::size_t cols = features::columns(set).size();
  std::vector<float> x, ms, z, margins;
  std::vector<float> row(cols);
  for (int i = 0; i < 800; ++i) {
    FeatureInput f = law.draw_features(rng);
    features::fill_row(f, set, row.data());
    x.insert(x.end(), row.begin(), row.end());
    ms.push_back(static_cast<float>(law.draw_ttft(f, rng)));
    z.push_back(std::log1p(ms.back()));
  }
  auto base = model::fit_linear_base(set, {x.data(), ms.size(), cols}, ms, true);
  for (std::size_t i = 0; i < ms.size(); ++i) {
    margins.push_back(base.margin(&x[i * cols]));
  }
  model::TrainParams p;
  p.num_trees = 30;
  auto booster = model::Booster::train(p, model::column_info(set), {x.data(), ms.size(), cols}, z,
                                       0.0, margins);
  model::OutputTransform t;
  t.log1p = true;
  t.centers = {2.0, 5.0};
  t.offsets = {0.1, 0.2};
  return model::TargetModel(std::move(booster), set, t, model::Objective::kQuantile, 0, base);
}

// `n` rows of the synthetic law; every `stretch_every`-th row far past the training window.
std::vector<FeatureInput> draw_rows(int n, uint64_t seed, int stretch_every = 0) {
  testing::SyntheticLaw law;
  std::mt19937_64 rng(seed);
  std::vector<FeatureInput> rows;
  for (int i = 0; i < n; ++i) {
    rows.push_back(law.draw_features(rng));
    if (stretch_every > 0 && i % stretch_every == 0) {
      rows.back().prefill_tokens_in_flight *= 5;
    }
  }
  return rows;
}

TEST(ModelStore, CompiledLinearBaseModelAgreesWithTheTrainersModel) {
  const auto rows = draw_rows(300, 3, 3);
  model::TargetModel plain = fit_on_base(FeatureSet::kTtft, 1);
  auto compiled = compile_model_file("ttft", plain.serialize(3));
  ASSERT_TRUE(compiled.base);
  ASSERT_TRUE(compiled.base->linear.has_value());
  EXPECT_EQ(compiled.version, 3);
  auto want = plain.predict(rows);
  std::vector<double> got(rows.size());
  CompiledTarget target{compiled.base, nullptr, nullptr};
  target.predict_batch(rows.data(), rows.size(), got.data());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << i;
    EXPECT_EQ(target.predict(rows[i]), want[i]) << i;
  }
}

TEST(ModelStore, CentralEstimateIsTheQuantileModelsLocationWithoutItsOffset) {
  const auto rows = draw_rows(200, 8);
  model::TargetModel plain = fit_on_base(FeatureSet::kTtft, 2);
  auto compiled = compile_model_file("ttft", plain.serialize(1));
  CompiledTarget target{compiled.base, nullptr, nullptr};
  std::vector<double> bound(rows.size()), expected(rows.size());
  target.predict_batch(rows.data(), rows.size(), bound.data(), expected.data());
  const auto margins = plain.predict_margin(rows);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double m = static_cast<double>(margins[i]);
    EXPECT_DOUBLE_EQ(expected[i], std::max(0.0, std::expm1(m))) << i;
    // Offsets 0.1..0.2 in log space: the p90 bound lies 10-22% above the median.
    EXPECT_GT(bound[i], expected[i]) << i;
    EXPECT_NEAR(std::log1p(bound[i]) - std::log1p(expected[i]), 0.15, 0.0501) << i;
    double single = -1;
    EXPECT_EQ(target.predict(rows[i], &single), bound[i]);
    EXPECT_EQ(single, expected[i]);
  }
  // The mean objective has no offset: its central estimate is its value.
  model::OutputTransform identity;
  EXPECT_EQ(identity.to_point_ms(12.5f), identity.to_ms(12.5f));
  EXPECT_EQ(identity.to_point_ms(-3.0f), 0.0) << "clipped at 0 like the value";
}

TEST(ModelStore, GatedLinearBaseModelsCompile) {
  model::GatedModel gated;
  gated.noqueue =
      std::make_shared<const model::TargetModel>(fit_on_base(FeatureSet::kTtftNoQueue, 4));
  gated.queued = std::make_shared<const model::TargetModel>(fit_on_base(FeatureSet::kTtft, 5));
  auto compiled = compile_model_file("ttft_gated", gated.serialize(9));
  ASSERT_TRUE(compiled.noqueue && compiled.queued);
  EXPECT_TRUE(compiled.noqueue->linear.has_value());
  EXPECT_TRUE(compiled.queued->linear.has_value());
  FeatureInput queued;
  queued.num_request_waiting = 3;
  queued.prefill_tokens_in_flight = 5000;
  CompiledTarget target{nullptr, compiled.noqueue, compiled.queued};
  EXPECT_EQ(target.predict(queued), gated.queued->predict(std::vector{queued})[0]);
}

}  // namespace
}  // namespace llmd::predictor
