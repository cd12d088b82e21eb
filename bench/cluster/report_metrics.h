#pragma once
// The numbers the report compares, derived from per-stage summaries: geometric means over
// stages, below-saturation and overload figures, best heuristic per seed, aggregation over seeds.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "bench/cluster/report.h"

namespace llmd::cluster {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One run (one scenario, seed and strategy).
struct RunFigures {
  // Geometric means over every stage of the per-stage percentiles: each load level counts the
  // same (whole-run percentiles would be decided by the saturated stages alone).
  double ttft_p50 = kNaN, ttft_p95 = kNaN, ttft_p99 = kNaN, tpot_p50 = kNaN, e2e_p95 = kNaN;
  double success = kNaN, out_tok_s = kNaN, prefix_hit = kNaN;
  bool has_slo = false;
  double slo_attainment = kNaN;  // whole run
  PredictionQuality pred_ttft;   // whole run, picked pod
  // Stages at or below 0.9x round-robin's saturation rate: g-means and the live error of the
  // picked pod's predicted TTFT (pooled over those stages).
  double below_ttft_p50 = kNaN, below_ttft_p95 = kNaN;
  PredictionQuality below_pred_ttft;
  // The other stages: mean over them of goodput (requests meeting their SLOs, or completed
  // within the client timeout without SLOs, per second), output tokens/s and success.
  double over_goodput_rps = kNaN, over_out_tok_s = kNaN, over_success = kNaN;
  double over_ttft_p95 = kNaN;  // g-mean over those stages
};
RunFigures run_figures(const Scenario& s, const std::vector<Summary>& sums);

// The seeds of one scenario, in run order.
struct ScenarioGroup {
  std::string name;
  std::vector<const ScenarioRuns*> seeds;
  const Scenario& scenario() const { return seeds.front()->scenario; }
  bool has_slo() const { return scenario().slo_ttft_ms || scenario().slo_tpot_ms; }
};
std::vector<ScenarioGroup> group_by_scenario(const std::vector<ScenarioRuns>& all);

// Index of a strategy's run in `sr` (-1 when it was not run).
int find_run(const ScenarioRuns& sr, Strategy s);
// Strategies run in a group, in run order.
std::vector<Strategy> strategies_of(const ScenarioGroup& g);

// The best heuristic of one seed (round-robin, load+prefix (1,1,1) or (3,2,2)), separately per
// metric: lowest g-mean TTFT p95, highest SLO attainment. -1 when no heuristic ran.
int best_heuristic_ttft(const ScenarioRuns& sr);
int best_heuristic_slo(const ScenarioRuns& sr);
// Past saturation (issue 28 item 4): the heuristic with the most goodput over the overload
// stages in SLO scenarios, the lowest g-mean TTFT p95 over them otherwise; -1 when the
// scenario has no overload stage.
int best_heuristic_overload(const ScenarioRuns& sr);

// Mean, min and max over seeds (NaN values are skipped).
struct Spread {
  double mean = kNaN, min = kNaN, max = kNaN;
  int n = 0;
  void add(double v);
};

// A predicted-latency strategy against the best heuristic on one seed: the goal is g-mean TTFT
// p95 <= the best heuristic's and, with SLOs, attainment >= the best heuristic's.
struct SeedVerdict {
  bool present = false;
  bool ttft_ok = false, slo_ok = true;
  double ttft_rel = kNaN;  // strategy / best heuristic - 1 (g-mean TTFT p95)
  double slo_pts = kNaN;   // attainment difference, percentage points
  Strategy best_ttft = Strategy::kRoundRobin, best_slo = Strategy::kRoundRobin;
  bool wins() const { return present && ttft_ok && slo_ok; }
};
SeedVerdict seed_verdict(const ScenarioRuns& sr, Strategy s);

// Seed means of one strategy in a group; the best heuristic's (per seed) as a pseudo-strategy.
struct GroupFigures {
  Spread ttft_p95, ttft_p50, slo;
};
GroupFigures group_figures(const ScenarioGroup& g, Strategy s);
GroupFigures best_heuristic_figures(const ScenarioGroup& g);

// Share of the best-heuristic-to-oracle gap (g-mean TTFT p95, means over seeds) that `s`
// recovers: (best heuristic - s) / (best heuristic - oracle). NaN without an oracle or a gap.
double gap_recovered(const ScenarioGroup& g, Strategy s);

// Share of a run's decisions made before its first trained model was published.
double cold_share(const RunResult& r);
// Max/min requests per pod (load spread); 0 when a pod got none.
double pod_spread(const RunResult& r);

}  // namespace llmd::cluster
