// Verdict v2 (suite_verdict.h): per-population criteria, the mean over trace seeds, ties within
// the seed-to-seed spread, the guard and the old verdict beside it. Plain figures, no runs.
#include <gtest/gtest.h>

#include "bench/cluster/suite_verdict.h"

namespace llmd::cluster {
namespace {

constexpr Strategy kMine = Strategy::kPredictedLeast;
constexpr Strategy kRr = Strategy::kRoundRobin;
constexpr Strategy kLp111 = Strategy::kLoadPrefix111;
constexpr Strategy kLp322 = Strategy::kLoadPrefix322;

// A run with only requests without SLO headers: TTFT p95 `t`, E2E p50 `e`.
PopulationFigures free_run(double t, double e = 100) {
  PopulationFigures p;
  p.free_ttft_p95 = t;
  p.ttft_p95 = t;
  p.e2e_p50 = e;
  return p;
}

// One seed per strategy, heuristics at 100 / 120 / 140 ms.
SeedFigures one_seed(double mine_ttft, double mine_e2e = 100) {
  return {{kRr, {free_run(120)}},
          {kLp111, {free_run(100)}},
          {kLp322, {free_run(140)}},
          {kMine, {free_run(mine_ttft, mine_e2e)}}};
}

TEST(SuiteVerdictV2, TtftWithinHalfAPercentOfTheLowestHeuristicIsAsGoodAndBeyondIsALossOfItsSize) {
  const VerdictV2 ok = verdict_v2(one_seed(100.4), kMine);
  ASSERT_TRUE(ok.present);
  EXPECT_EQ(ok.ttft.against, kLp111);
  EXPECT_EQ(ok.outcome, Outcome::kAsGood);
  EXPECT_FALSE(ok.slo.present) << "no request carries SLO headers";

  const VerdictV2 lost = verdict_v2(one_seed(112), kMine);
  EXPECT_EQ(lost.outcome, Outcome::kLoss);
  EXPECT_NEAR(lost.ttft.loss, 0.12, 1e-9);
  EXPECT_EQ(lost.ttft.spread, 0) << "one seed has no spread";
  EXPECT_FALSE(lost.old_as_good);
  EXPECT_NEAR(lost.old_ttft_rel, 0.12, 1e-9);
}

TEST(SuiteVerdictV2, TheVerdictIsOnTheMeanOverSeedsAndALossWithinTheSpreadIsATie) {
  // lp111 100/100/100; mine 98/104/107 -> mean 103 (+3 %), per-seed deltas -2 %..+7 %, spread
  // 4.5 %: a tie.
  SeedFigures f = {{kRr, {free_run(200), free_run(200), free_run(200)}},
                   {kLp111, {free_run(100), free_run(100), free_run(100)}},
                   {kLp322, {free_run(150), free_run(150), free_run(150)}},
                   {kMine, {free_run(98), free_run(104), free_run(107)}}};
  VerdictV2 v = verdict_v2(f, kMine);
  EXPECT_NEAR(v.ttft.delta, 0.03, 1e-9);
  EXPECT_NEAR(v.ttft.spread, 0.045, 1e-9);
  EXPECT_EQ(v.ttft.outcome, Outcome::kTie);
  EXPECT_EQ(v.outcome, Outcome::kTie);
  // The same mean excess with seeds that agree (102/103/104: spread 1 %) is a loss.
  f[kMine] = {free_run(102), free_run(103), free_run(104)};
  v = verdict_v2(f, kMine);
  EXPECT_NEAR(v.ttft.spread, 0.01, 1e-9);
  EXPECT_EQ(v.outcome, Outcome::kLoss);
  EXPECT_NEAR(v.ttft.loss, 0.03, 1e-9);
}

TEST(SuiteVerdictV2, EachPopulationIsJudgedOnItsOwnAgainstTheHeuristicBestOnIt) {
  // Mixed scenario: round-robin has the lowest TTFT of the free requests, lp322 the highest
  // attainment of the SLO requests; the old verdict judges all requests together.
  auto run = [](double free_ttft, double slo_att, double all_ttft, double all_att) {
    PopulationFigures p;
    p.free_ttft_p95 = free_ttft;
    p.slo_attainment = slo_att;
    p.e2e_p50 = 100;
    p.ttft_p95 = all_ttft;
    p.attainment = all_att;
    return p;
  };
  SeedFigures f = {{kRr, {run(50, 80, 90, 90)}},
                   {kLp111, {run(60, 85, 70, 92)}},
                   {kLp322, {run(70, 90, 80, 95)}},
                   {kMine, {run(50.1, 89.6, 75, 95)}}};
  VerdictV2 v = verdict_v2(f, kMine);
  EXPECT_EQ(v.ttft.against, kRr);
  EXPECT_EQ(v.slo.against, kLp322);
  EXPECT_NEAR(v.slo.delta, -0.4, 1e-9);
  EXPECT_EQ(v.outcome, Outcome::kAsGood);
  EXPECT_FALSE(v.old_as_good) << "all requests: 75 ms against lp111's 70 ms";
  EXPECT_EQ(v.old_best, kLp111);
  // 0.6 points short of lp322's attainment: a loss of 0.6 points.
  f[kMine] = {run(50.1, 89.4, 75, 95)};
  v = verdict_v2(f, kMine);
  EXPECT_EQ(v.slo.outcome, Outcome::kLoss);
  EXPECT_NEAR(v.slo.loss, 0.6, 1e-9);
  EXPECT_EQ(v.ttft.outcome, Outcome::kAsGood);
  EXPECT_EQ(v.outcome, Outcome::kLoss);
}

TEST(SuiteVerdictV2, TheE2eGuardFailsAFastFirstTokenThatCostsTheWholeRequest) {
  EXPECT_EQ(verdict_v2(one_seed(90, 104.9), kMine).outcome, Outcome::kAsGood);
  const VerdictV2 v = verdict_v2(one_seed(90, 106), kMine);
  EXPECT_EQ(v.ttft.outcome, Outcome::kAsGood);
  EXPECT_EQ(v.e2e.outcome, Outcome::kLoss);
  EXPECT_NEAR(v.e2e.loss, 0.06, 1e-9);
  EXPECT_EQ(v.outcome, Outcome::kLoss);
}

TEST(SuiteVerdictV2, TheOraclesAreJudgedTheSameWayAndTheGapUsesTheBetterOne) {
  SeedFigures f = one_seed(90);
  f[Strategy::kOracle] = {free_run(85)};
  f[Strategy::kOracleCost] = {free_run(80)};
  const VerdictV2 o = verdict_v2(f, Strategy::kOracle);
  EXPECT_EQ(o.outcome, Outcome::kAsGood);
  const VerdictV2 v = verdict_v2(f, kMine);
  EXPECT_NEAR(v.oracle_rel, -0.2, 1e-9);
  EXPECT_NEAR(v.gap_recovered, 0.5, 1e-9);  // (100 - 90) / (100 - 80)
  EXPECT_FALSE(verdict_v2(f, Strategy::kPredictedUpstream).present) << "did not run";
}

TEST(SuiteVerdictV2, PopulationFiguresSplitTheRequestsAndSkipStagesWithoutThem) {
  auto stage = [](double free_p95, std::size_t free_n, double all_p95, double e2e_p50) {
    Summary s;
    s.free_ttft.n = free_n;
    s.free_ttft.p95 = free_p95;
    s.ttft.n = 10;
    s.ttft.p95 = all_p95;
    s.e2e.n = 10;
    s.e2e.p50 = e2e_p50;
    return s;
  };
  Summary total;
  total.stage = -1;
  total.has_slo = true;
  total.slo_attainment = 0.9;
  total.slo_requests = 20;
  total.slo_pop_attainment = 0.8;
  const auto p = population_figures(
      {stage(10, 5, 20, 50), stage(0, 0, 40, 200), stage(40, 5, 80, 800), total});
  EXPECT_NEAR(p.free_ttft_p95, 20, 1e-9) << "g-mean of 10 and 40; the stage without any skipped";
  EXPECT_NEAR(p.ttft_p95, 40, 1e-9);
  EXPECT_NEAR(p.e2e_p50, 200, 1e-9);
  EXPECT_NEAR(p.slo_attainment, 80, 1e-9);
  EXPECT_NEAR(p.attainment, 90, 1e-9);
}

}  // namespace
}  // namespace llmd::cluster
