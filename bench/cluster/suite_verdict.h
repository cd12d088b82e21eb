#pragma once
// Verdict v2 of the generalization suite (issue 51): is a strategy at least as good as the best
// heuristic (round-robin, load+prefix (1,1,1), (3,2,2)) on one scenario, judged on the mean
// over its trace seeds, per population, with the seed-to-seed spread deciding what is a tie.
//
//   (a) requests without SLO headers: g-mean over stages of their TTFT p95 <= the lowest
//       heuristic's x 1.005;
//   (b) requests with SLO headers: their attainment >= the highest heuristic's - 0.5 points;
//   (c) guard: g-mean over stages of the E2E p50 of all requests <= the lowest heuristic's x 1.05.
//
// A criterion's loss is its size (TTFT or E2E excess as a fraction, attainment shortfall in
// points); a loss no larger than the scenario's seed-to-seed spread of the same comparison is a
// tie (not a win, not a loss). Plain functions over plain figures: no simulator, no files;
// compare_suite.py implements the same rules on suite_seeds.csv (tested against each other's
// examples in suite_verdict_test.cc and compare_suite_test.py).
#include <array>
#include <map>
#include <string_view>
#include <vector>

#include "bench/cluster/report_metrics.h"

namespace llmd::cluster {

inline constexpr double kV2TtftTolerance = 0.005;  // (a): x 1.005
inline constexpr double kV2SloTolerancePts = 0.5;  // (b): - 0.5 points
inline constexpr double kV2E2eTolerance = 0.05;    // (c): x 1.05

inline constexpr std::array kSuiteHeuristics = {Strategy::kRoundRobin, Strategy::kLoadPrefix111,
                                                Strategy::kLoadPrefix322};

// What verdict v2 (and, for the second column, the old verdict) reads from one run.
struct PopulationFigures {
  double free_ttft_p95 = kNaN;   // (a): g-mean over stages, requests without SLO headers
  double slo_attainment = kNaN;  // (b): percent of the requests with SLO headers meeting them
  double e2e_p50 = kNaN;         // (c): g-mean over stages, all successful requests
  double ttft_p95 = kNaN;        // old verdict: g-mean over stages, all requests
  double attainment = kNaN;      // old verdict: percent of all requests (NaN without SLOs)
};
// From a run's per-stage summaries (stages first, the whole run last; summarize()).
PopulationFigures population_figures(const std::vector<Summary>& sums);

enum class Outcome { kAsGood, kTie, kLoss };
std::string_view outcome_name(Outcome o);  // "as good", "tie", "loss"

struct CriterionVerdict {
  bool present = false;                      // the population exists and both sides ran
  Strategy against = Strategy::kRoundRobin;  // the heuristic judged against (best by the mean)
  double delta = kNaN;  // mean-based: ratio - 1 for (a) and (c), points for (b)
  double loss = 0;      // > 0 when outside the tolerance: excess fraction or shortfall points
  double spread = 0;    // half the range over seeds of the per-seed delta (0 with one seed)
  Outcome outcome = Outcome::kAsGood;
};

struct VerdictV2 {
  bool present = false;
  CriterionVerdict ttft, slo, e2e;
  Outcome outcome = Outcome::kAsGood;
  // Old verdict (issue 28) on the same means, for the second column: g-mean TTFT p95 of all
  // requests within +0.5 % of the fastest heuristic's and attainment within 0.5 points.
  bool old_as_good = false;
  double old_ttft_rel = kNaN;
  double old_slo_pts = kNaN;
  Strategy old_best = Strategy::kRoundRobin;
  // (fastest heuristic - s) / (fastest heuristic - better oracle) on the mean g-mean TTFT p95
  // of all requests; NaN without an oracle run or when no oracle beats the heuristic.
  double gap_recovered = kNaN;
  double oracle_rel = kNaN;  // better oracle / fastest heuristic - 1
  // Ordering of losses: the largest of TTFT excess / 10 %, shortfall / 5 points, E2E excess /
  // 10 % (issue 51's bounds), counting only criteria that lost.
  double severity() const;
};

// Figures per strategy, one entry per trace seed in the same seed order for every strategy.
using SeedFigures = std::map<Strategy, std::vector<PopulationFigures>>;
// Verdict v2 of `s` (absent when it or no heuristic ran).
VerdictV2 verdict_v2(const SeedFigures& runs, Strategy s);

// The seeds of one suite scenario as SeedFigures.
SeedFigures seed_figures(const ScenarioGroup& g);

}  // namespace llmd::cluster
