#include "trainer/model_fitter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "common/testing/synthetic_law.h"
#include "trainer/evaluation.h"

namespace llmd::trainer {
namespace {

using features::FeatureInput;
using features::FeatureSet;

constexpr double kZ90 = 1.2815515655446004;

std::vector<Sample> draw(const testing::SyntheticLaw& law, Target t, std::size_t n,
                         std::mt19937_64& rng) {
  std::vector<Sample> out;
  for (std::size_t i = 0; i < n; ++i) {
    FeatureInput f = law.draw_features(rng);
    double y = t == Target::kTtft ? law.draw_ttft(f, rng) : law.draw_tpot(f, rng);
    out.push_back({f, static_cast<float>(y)});
  }
  return out;
}

struct Scored {
  std::vector<double> pred, actual, truth_p90;
};

Scored score(const model::TargetModel& m, const testing::SyntheticLaw& law, Target t,
             const std::vector<Sample>& fresh) {
  Scored s;
  std::vector<FeatureInput> rows;
  for (const auto& x : fresh) {
    rows.push_back(x.features);
    s.actual.push_back(x.actual_ms);
    double mean = t == Target::kTtft ? law.ttft_mean(x.features) : law.tpot_mean(x.features);
    s.truth_p90.push_back(mean * law.quantile_factor(kZ90));
  }
  s.pred = m.predict(rows);
  return s;
}

// Coverage per third of the true latency: a constant at the marginal p90 fails this.
std::vector<double> coverage_by_regime(const Scored& s) {
  std::vector<std::size_t> idx(s.actual.size());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    idx[i] = i;
  }
  std::sort(idx.begin(), idx.end(),
            [&](auto a, auto b) { return s.truth_p90[a] < s.truth_p90[b]; });
  std::vector<double> out;
  for (int third = 0; third < 3; ++third) {
    std::size_t lo = third * idx.size() / 3, hi = (third + 1) * idx.size() / 3, cov = 0;
    for (std::size_t k = lo; k < hi; ++k) {
      cov += s.actual[idx[k]] <= s.pred[idx[k]] ? 1 : 0;
    }
    out.push_back(static_cast<double>(cov) / static_cast<double>(hi - lo));
  }
  return out;
}

// (target, linear base): the trainer serves with the linear base on (TrainerConfig), so the
// band must hold there too, not only for plain trees.
class QuantileFitTest : public ::testing::TestWithParam<std::tuple<Target, bool>> {};

TEST_P(QuantileFitTest, CoverageHoldsInEveryRegimeAndTracksTrueQuantile) {
  const Target t = std::get<0>(GetParam());
  testing::SyntheticLaw law;
  std::mt19937_64 rng(7);
  auto train = draw(law, t, 3000, rng);
  auto fresh = draw(law, t, 4000, rng);
  FitConfig cfg;
  cfg.linear_base = std::get<1>(GetParam());
  auto set = t == Target::kTtft ? FeatureSet::kTtft : FeatureSet::kTpot;
  auto model = fit_target_model(cfg, set, train, 1);
  auto s = score(*model, law, t, fresh);
  auto e = evaluate(s.pred, s.actual, 0.9);
  auto regimes = coverage_by_regime(s);
  std::printf("coverage %.1f%% regimes %.3f %.3f %.3f pinball %.3f\n", e.coverage_percent,
              regimes[0], regimes[1], regimes[2], e.pinball_loss);
  EXPECT_GE(e.coverage_percent, 85.0);
  EXPECT_LE(e.coverage_percent, 95.0);
  for (double c : coverage_by_regime(s)) {
    EXPECT_GE(c, 0.85) << "per-regime coverage";
    EXPECT_LE(c, 0.95) << "per-regime coverage";
  }
  // Relative error against the known conditional p90.
  double rel = 0;
  for (std::size_t i = 0; i < s.pred.size(); ++i) {
    rel += std::fabs(s.pred[i] - s.truth_p90[i]) / s.truth_p90[i];
  }
  rel /= static_cast<double>(s.pred.size());
  std::printf("mean relative error vs true p90: %.3f\n", rel);
  EXPECT_LT(rel, 0.12) << "mean relative error vs true p90";
  // Better than the best constant (the marginal p90) by pinball loss.
  std::vector<double> actual_copy(s.actual);
  double p90 = empirical_quantile(actual_copy, 0.9);
  std::vector<double> constant(s.actual.size(), p90);
  EXPECT_LT(e.pinball_loss, 0.6 * evaluate(constant, s.actual, 0.9).pinball_loss);
}

INSTANTIATE_TEST_SUITE_P(TargetsAndBase, QuantileFitTest,
                         ::testing::Combine(::testing::Values(Target::kTtft, Target::kTpot),
                                            ::testing::Bool()));

TEST(MeanFit, MapeBelowTenPercentAndTtftGrowsWithInput) {
  testing::SyntheticLaw law;
  law.sigma = 0.05;
  std::mt19937_64 rng(11);
  auto train = draw(law, Target::kTtft, 3000, rng);
  auto fresh = draw(law, Target::kTtft, 2000, rng);
  FitConfig cfg;
  cfg.objective = model::Objective::kMean;
  auto model = fit_target_model(cfg, FeatureSet::kTtft, train, 3);
  auto s = score(*model, law, Target::kTtft, fresh);
  EXPECT_LT(evaluate(s.pred, s.actual, 0.9).mape_percent, 10.0);

  FeatureInput f;
  f.kv_cache_percentage = 0.3;
  f.num_request_running = 8;
  std::vector<FeatureInput> rows;
  for (int64_t len : {100, 1000, 2000, 3500}) {
    f.input_token_length = len;
    rows.push_back(f);
  }
  auto p = model->predict(rows);
  for (std::size_t i = 1; i < p.size(); ++i) {
    EXPECT_GT(p[i], p[i - 1]);
  }
}

// A router ranks pods by these predictions: a pod with more queued work must never be predicted
// faster, nor a better cache hit slower, even where noisy samples say so. Very noisy, few samples:
// without the constraints the trees learn inversions along the load columns.
TEST(MonotoneFit, MoreLoadIsNeverPredictedFasterAndACacheHitNeverSlower) {
  testing::SyntheticLaw law;
  law.sigma = 0.6;
  std::mt19937_64 rng(5);
  auto train = draw(law, Target::kTtft, 400, rng);
  FitConfig cfg;
  auto model = fit_target_model(cfg, FeatureSet::kTtft, train, 9);
  std::mt19937_64 pick(17);
  int checked = 0;
  for (int base = 0; base < 40; ++base) {
    FeatureInput f = law.draw_features(pick);
    std::vector<FeatureInput> waiting, in_flight, running, prefix;
    for (int step = 0; step < 12; ++step) {
      FeatureInput a = f;
      a.num_request_waiting = step;
      waiting.push_back(a);
      FeatureInput b = f;
      b.prefill_tokens_in_flight = step * 800;
      in_flight.push_back(b);
      FeatureInput c = f;
      c.num_request_running = step * 4;
      running.push_back(c);
      FeatureInput d = f;
      d.prefix_cache_score = step / 11.0;
      prefix.push_back(d);
    }
    for (auto* rows : {&waiting, &in_flight, &running}) {
      auto p = model->predict(*rows);
      for (std::size_t i = 1; i < p.size(); ++i, ++checked) {
        ASSERT_GE(p[i], p[i - 1]) << "base " << base << " step " << i;
      }
    }
    // Within one prefill_score_bucket: the contract's categorical bucket column cannot carry a
    // monotone constraint, so a step across a bucket boundary may move either way.
    auto p = model->predict(prefix);
    for (std::size_t i = 1; i < p.size(); ++i) {
      if (features::prefill_score_bucket(prefix[i].prefix_cache_score) !=
          features::prefill_score_bucket(prefix[i - 1].prefix_cache_score)) {
        continue;
      }
      ++checked;
      ASSERT_LE(p[i], p[i - 1]) << "prefix, base " << base << " step " << i;
    }
  }
  EXPECT_GT(checked, 40 * 3 * 11);
}

TEST(EmpiricalQuantile, Interpolates) {
  std::vector<double> v = {4, 1, 3, 2, 5};
  EXPECT_DOUBLE_EQ(empirical_quantile(v, 0.5), 3.0);
  EXPECT_DOUBLE_EQ(empirical_quantile(v, 0.9), 4.6);
}

// Trees are flat outside their training window; a linear base is not. Train with queues of at
// most 12 waiting / 8,000 prefill tokens in flight, ask about three times that.
TEST(LinearBaseFit, ExtrapolatesPastTheTrainingWindowForBothObjectives) {
  testing::SyntheticLaw law;
  law.inflight_signal = true;
  std::mt19937_64 rng(21);
  auto train = draw(law, Target::kTtft, 1500, rng);
  FeatureInput edge;
  edge.input_token_length = 1000;
  edge.num_request_waiting = 12;
  edge.prefill_tokens_in_flight = 8000;
  FeatureInput beyond = edge;
  beyond.num_request_waiting = 36;
  beyond.prefill_tokens_in_flight = 24000;
  const double truth_gain = law.ttft_mean(beyond) - law.ttft_mean(edge);  // 1,280 ms
  for (auto objective : {model::Objective::kMean, model::Objective::kQuantile}) {
    FitConfig cfg;
    cfg.objective = objective;
    auto trees = fit_target_model(cfg, FeatureSet::kTtft, train, 3);
    cfg.linear_base = true;
    auto based = fit_target_model(cfg, FeatureSet::kTtft, train, 3);
    ASSERT_TRUE(based->linear_base().has_value());
    auto t = trees->predict(std::vector{edge, beyond});
    auto b = based->predict(std::vector{edge, beyond});
    EXPECT_LT(t[1] - t[0], 0.1 * truth_gain) << model::objective_name(objective);
    EXPECT_GT(b[1] - b[0], 0.5 * truth_gain) << model::objective_name(objective);
    // Inside the window the base costs no accuracy.
    std::mt19937_64 fresh_rng(22);
    auto fresh = draw(law, Target::kTtft, 400, fresh_rng);
    std::vector<FeatureInput> rows;
    std::vector<double> actual;
    for (const auto& s : fresh) {
      rows.push_back(s.features);
      actual.push_back(s.actual_ms);
    }
    auto mape = [&](const model::TargetModel& m) {
      auto p = m.predict(rows);
      double sum = 0;
      for (std::size_t i = 0; i < p.size(); ++i) sum += std::abs(p[i] - actual[i]) / actual[i];
      return sum / static_cast<double>(p.size());
    };
    EXPECT_LT(mape(*based), mape(*trees) * 1.1) << model::objective_name(objective);
  }
}

}  // namespace
}  // namespace llmd::trainer
