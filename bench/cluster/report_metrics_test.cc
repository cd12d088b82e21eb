// Tests of the report's arithmetic on hand-made summaries: g-means over stages, the
// below-saturation / overload split, best heuristic per seed, verdicts and the gap recovered.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/cluster/report_metrics.h"
#include "bench/cluster/suite.h"

namespace llmd::cluster {
namespace {

Summary stage(int i, double rate, double p50, double p95, double goodput = 0,
              std::size_t pred_n = 0, double mape = 0) {
  Summary s;
  s.stage = i;
  s.rate = rate;
  s.requests = s.ok = 10;
  s.success_rate = 1;
  s.ttft.n = 10;
  s.ttft.p50 = p50;
  s.ttft.p95 = p95;
  s.goodput_rps = goodput;
  s.output_tokens_per_s = 100 * (i + 1);
  s.pred_ttft.n = pred_n;
  s.pred_ttft.mape_percent = mape;
  return s;
}

Scenario two_by_two() {
  Scenario sc;
  sc.name = "two-by-two";
  sc.stages = {{10, 1}, {20, 1}, {30, 1}, {40, 1}};
  sc.saturation_rps = 30;  // 0.9x = 27: stages 1-2 below, 3-4 overload
  return sc;
}

// Four stages with TTFT p95 = base x {1, 2, 4, 8}, plus the whole-run summary.
std::vector<Summary> sums(double base, double slo = -1) {
  std::vector<Summary> out = {stage(0, 10, base / 2, base, 10, 100, 10),
                              stage(1, 20, base / 2, 2 * base, 20, 300, 30),
                              stage(2, 30, base, 4 * base, 25), stage(3, 40, base, 8 * base, 15)};
  Summary total = stage(-1, 25, base, 8 * base);
  if (slo >= 0) {
    total.has_slo = true;
    total.slo_attainment = slo;
  }
  out.push_back(total);
  return out;
}

ScenarioRuns seed_runs(uint64_t seed, std::vector<std::pair<Strategy, double>> runs,
                       double slo_pl = -1, double slo_rr = -1) {
  ScenarioRuns sr;
  sr.scenario = two_by_two();
  sr.scenario.seed = seed;
  for (auto [s, base] : runs) {
    RunResult r;
    r.strategy = s;
    sr.runs.push_back(r);
    const double slo = s == Strategy::kPredictedLeast ? slo_pl
                       : s == Strategy::kRoundRobin   ? slo_rr
                                                      : (slo_pl >= 0 ? 0.5 : -1);
    sr.summaries.push_back(sums(base, slo));
    sr.cold_share.push_back(0);
  }
  return sr;
}

TEST(ClusterSimReportTest, FiguresSplitStagesAtSaturation) {
  const RunFigures f = run_figures(two_by_two(), sums(10));
  // g-mean of 10, 20, 40, 80 = 10 x 2^1.5.
  EXPECT_NEAR(f.ttft_p95, 10 * std::pow(2.0, 1.5), 1e-9);
  EXPECT_NEAR(f.below_ttft_p95, std::sqrt(10.0 * 20.0), 1e-9);
  EXPECT_NEAR(f.below_ttft_p50, 5.0, 1e-9);
  // MAPE pooled by request count: (10 x 100 + 30 x 300) / 400.
  EXPECT_EQ(f.below_pred_ttft.n, 400u);
  EXPECT_NEAR(f.below_pred_ttft.mape_percent, 25.0, 1e-9);
  EXPECT_NEAR(f.over_goodput_rps, 20.0, 1e-9);  // mean of 25 and 15
  EXPECT_NEAR(f.over_out_tok_s, 350.0, 1e-9);   // mean of 300 and 400
  EXPECT_NEAR(f.over_ttft_p95, std::sqrt(40.0 * 80.0), 1e-9);
  EXPECT_TRUE(std::isnan(f.slo_attainment));
  Scenario unknown = two_by_two();
  unknown.saturation_rps = 0;
  const RunFigures g = run_figures(unknown, sums(10));
  EXPECT_TRUE(std::isnan(g.below_ttft_p95));
  EXPECT_TRUE(std::isnan(g.over_goodput_rps));
}

TEST(ClusterSimReportTest, VerdictsAndGapUseTheBestHeuristicPerSeed) {
  // Seed 1: lp322 is the best heuristic (8), predicted-latency 9, oracle 6.
  // Seed 2: round-robin is best (10), predicted-latency 10 (a tie counts as a win), oracle 6.
  std::vector<ScenarioRuns> all;
  all.push_back(seed_runs(1, {{Strategy::kRoundRobin, 12},
                              {Strategy::kLoadPrefix322, 8},
                              {Strategy::kPredictedLeast, 9},
                              {Strategy::kOracle, 6}}));
  all.push_back(seed_runs(2, {{Strategy::kRoundRobin, 10},
                              {Strategy::kLoadPrefix322, 11},
                              {Strategy::kPredictedLeast, 10},
                              {Strategy::kOracle, 6}}));
  const auto groups = group_by_scenario(all);
  ASSERT_EQ(groups.size(), 1u);
  ASSERT_EQ(groups[0].seeds.size(), 2u);
  const SeedVerdict v1 = seed_verdict(all[0], Strategy::kPredictedLeast);
  EXPECT_TRUE(v1.present);
  EXPECT_FALSE(v1.wins());
  EXPECT_EQ(v1.best_ttft, Strategy::kLoadPrefix322);
  EXPECT_NEAR(v1.ttft_rel, 9.0 / 8.0 - 1.0, 1e-9);
  const SeedVerdict v2 = seed_verdict(all[1], Strategy::kPredictedLeast);
  EXPECT_TRUE(v2.wins());
  EXPECT_EQ(v2.best_ttft, Strategy::kRoundRobin);
  // g-means scale with the base: best heuristic mean (8 + 10) / 2 = 9 x k, predicted-latency
  // (9 + 10) / 2 = 9.5 x k, oracle 6 x k: gap recovered (9 - 9.5) / (9 - 6).
  const double k = std::pow(2.0, 1.5);
  const GroupFigures bh = best_heuristic_figures(groups[0]);
  EXPECT_NEAR(bh.ttft_p95.mean, 9 * k, 1e-9);
  EXPECT_NEAR(bh.ttft_p95.min, 8 * k, 1e-9);
  EXPECT_NEAR(bh.ttft_p95.max, 10 * k, 1e-9);
  EXPECT_NEAR(gap_recovered(groups[0], Strategy::kPredictedLeast), -0.5 / 3.0, 1e-9);
  // Without an oracle there is no gap to recover.
  all[0].summaries[3].clear();
  all[1].summaries[3].clear();
  EXPECT_TRUE(std::isnan(gap_recovered(group_by_scenario(all)[0], Strategy::kPredictedLeast)));
}

TEST(ClusterSimReportTest, SloScenariosNeedBothConditions) {
  // Lower TTFT than every heuristic but lower attainment than round-robin: not a win.
  const ScenarioRuns sr = seed_runs(
      1,
      {{Strategy::kRoundRobin, 10}, {Strategy::kLoadPrefix111, 12}, {Strategy::kPredictedLeast, 9}},
      /*slo_pl=*/0.80, /*slo_rr=*/0.85);
  const SeedVerdict v = seed_verdict(sr, Strategy::kPredictedLeast);
  EXPECT_TRUE(v.ttft_ok);
  EXPECT_FALSE(v.slo_ok);
  EXPECT_FALSE(v.wins());
  EXPECT_EQ(v.best_slo, Strategy::kRoundRobin);
  EXPECT_NEAR(v.slo_pts, -5.0, 1e-9);
}

TEST(ClusterSimReportTest, PastSaturationTheVerdictComparesGoodputWithSlosAndTtftWithout) {
  // Without SLOs: the overload stages' g-mean TTFT p95 against the lowest heuristic's.
  ScenarioRuns sr = seed_runs(1, {{Strategy::kRoundRobin, 12},
                                  {Strategy::kLoadPrefix322, 8},
                                  {Strategy::kPredictedLeast, 10}});
  EXPECT_EQ(best_heuristic_overload(sr), 1);
  SuiteVerdict v = suite_verdict(sr, Strategy::kPredictedLeast);
  EXPECT_NEAR(v.overload_loss, 10.0 / 8.0 - 1.0, 1e-9);
  EXPECT_FALSE(v.overload_ok());
  // With SLOs: goodput over the overload stages (25 and 15 req/s in every run here) against
  // the heuristic with the most; equal goodput is not worse.
  sr = seed_runs(1, {{Strategy::kRoundRobin, 12}, {Strategy::kPredictedLeast, 10}}, 0.8, 0.9);
  sr.scenario.slo_ttft_ms = 100;
  v = suite_verdict(sr, Strategy::kPredictedLeast);
  EXPECT_NEAR(v.overload_loss, 0.0, 1e-9);
  EXPECT_TRUE(v.overload_ok());
  sr.summaries[1][3].goodput_rps = 5;  // the last stage: mean (25 + 5) / 2 = 15 against 20
  v = suite_verdict(sr, Strategy::kPredictedLeast);
  EXPECT_NEAR(v.overload_loss, 1.0 - 15.0 / 20.0, 1e-9);
  EXPECT_FALSE(v.overload_ok());
  // No stage above 0.9x saturation: no overload verdict.
  sr.scenario.saturation_rps = 100;
  EXPECT_EQ(best_heuristic_overload(sr), -1);
  EXPECT_TRUE(std::isnan(suite_verdict(sr, Strategy::kPredictedLeast).overload_loss));
}

}  // namespace
}  // namespace llmd::cluster
