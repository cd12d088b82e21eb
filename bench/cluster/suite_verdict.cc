#include "bench/cluster/suite_verdict.h"

#include <algorithm>
#include <cmath>

namespace llmd::cluster {

namespace {

// Geometric mean over the stages (every summary but the last) where `has(stage)`.
template <typename Has, typename F>
double stage_gmean(const std::vector<Summary>& sums, Has has, F f) {
  double log_sum = 0;
  int n = 0;
  for (std::size_t i = 0; i + 1 < sums.size(); ++i) {
    if (!has(sums[i])) continue;
    log_sum += std::log(std::max(f(sums[i]), 1e-3));
    ++n;
  }
  return n ? std::exp(log_sum / n) : kNaN;
}

double mean_of(const std::vector<double>& v) {
  double sum = 0;
  int n = 0;
  for (double x : v) {
    if (std::isfinite(x)) {
      sum += x;
      ++n;
    }
  }
  return n ? sum / n : kNaN;
}

using Field = double PopulationFigures::*;

std::vector<double> column(const SeedFigures& runs, Strategy s, Field f) {
  std::vector<double> out;
  if (auto it = runs.find(s); it != runs.end()) {
    for (const auto& p : it->second) out.push_back(p.*f);
  }
  return out;
}

// One criterion. `higher_is_better`: attainment (points, tolerance subtracted); else a ratio
// (delta = mine / reference - 1, tolerance a fraction).
CriterionVerdict judge(const SeedFigures& runs, Strategy s, Field f, bool higher_is_better,
                       double tolerance) {
  CriterionVerdict v;
  const std::vector<double> mine = column(runs, s, f);
  const double m = mean_of(mine);
  if (!std::isfinite(m)) return v;
  double best = kNaN;
  for (Strategy h : kSuiteHeuristics) {
    const double x = mean_of(column(runs, h, f));
    if (!std::isfinite(x)) continue;
    if (!std::isfinite(best) || (higher_is_better ? x > best : x < best)) {
      best = x;
      v.against = h;
    }
  }
  if (!std::isfinite(best)) return v;
  v.present = true;
  auto delta = [&](double a, double b) { return higher_is_better ? a - b : a / b - 1; };
  v.delta = delta(m, best);
  const std::vector<double> ref = column(runs, v.against, f);
  double lo = kNaN, hi = kNaN;
  for (std::size_t k = 0; k < std::min(mine.size(), ref.size()); ++k) {
    if (!std::isfinite(mine[k]) || !std::isfinite(ref[k])) continue;
    const double d = delta(mine[k], ref[k]);
    lo = std::isfinite(lo) ? std::min(lo, d) : d;
    hi = std::isfinite(hi) ? std::max(hi, d) : d;
  }
  v.spread = std::isfinite(lo) ? (hi - lo) / 2 : 0;
  const double excess = higher_is_better ? -v.delta : v.delta;  // the loss's size
  if (excess > tolerance) {
    v.loss = excess;
    v.outcome = excess <= v.spread ? Outcome::kTie : Outcome::kLoss;
  }
  return v;
}

}  // namespace

std::string_view outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kAsGood:
      return "as good";
    case Outcome::kTie:
      return "tie";
    case Outcome::kLoss:
      return "loss";
  }
  return "?";
}

PopulationFigures population_figures(const std::vector<Summary>& sums) {
  PopulationFigures p;
  if (sums.empty()) return p;
  p.free_ttft_p95 = stage_gmean(
      sums, [](const Summary& s) { return s.free_ttft.n > 0; },
      [](const Summary& s) { return s.free_ttft.p95; });
  p.e2e_p50 = stage_gmean(
      sums, [](const Summary& s) { return s.e2e.n > 0; },
      [](const Summary& s) { return s.e2e.p50; });
  p.ttft_p95 = stage_gmean(
      sums, [](const Summary& s) { return s.ttft.n > 0; },
      [](const Summary& s) { return s.ttft.p95; });
  const Summary& t = sums.back();
  p.slo_attainment = t.slo_requests > 0 ? 100 * t.slo_pop_attainment : kNaN;
  p.attainment = t.has_slo ? 100 * t.slo_attainment : kNaN;
  return p;
}

double VerdictV2::severity() const {
  double out = -1e9;
  if (ttft.present) out = std::max(out, ttft.delta / 0.10);
  if (slo.present) out = std::max(out, -slo.delta / 5);
  if (e2e.present) out = std::max(out, e2e.delta / 0.10);
  return out;
}

VerdictV2 verdict_v2(const SeedFigures& runs, Strategy s) {
  VerdictV2 v;
  v.ttft = judge(runs, s, &PopulationFigures::free_ttft_p95, false, kV2TtftTolerance);
  v.slo = judge(runs, s, &PopulationFigures::slo_attainment, true, kV2SloTolerancePts);
  v.e2e = judge(runs, s, &PopulationFigures::e2e_p50, false, kV2E2eTolerance);
  v.present = v.e2e.present && (v.ttft.present || v.slo.present);
  if (!v.present) return v;
  for (const CriterionVerdict* c : {&v.ttft, &v.slo, &v.e2e}) {
    if (c->present && c->outcome == Outcome::kLoss) {
      v.outcome = Outcome::kLoss;
    } else if (c->present && c->outcome == Outcome::kTie && v.outcome == Outcome::kAsGood) {
      v.outcome = Outcome::kTie;
    }
  }
  // The old verdict on the same means.
  const CriterionVerdict all = judge(runs, s, &PopulationFigures::ttft_p95, false, 0);
  const CriterionVerdict att = judge(runs, s, &PopulationFigures::attainment, true, 0);
  v.old_best = all.against;
  v.old_ttft_rel = all.delta;
  v.old_slo_pts = att.present ? att.delta : kNaN;
  v.old_as_good = all.present && all.delta <= kV2TtftTolerance &&  // the same +0.5 %
                  (!att.present || att.delta >= -kV2SloTolerancePts);
  if (all.present) {
    const double b = mean_of(column(runs, all.against, &PopulationFigures::ttft_p95));
    const double m = mean_of(column(runs, s, &PopulationFigures::ttft_p95));
    const double o =
        std::fmin(mean_of(column(runs, Strategy::kOracle, &PopulationFigures::ttft_p95)),
                  mean_of(column(runs, Strategy::kOracleCost, &PopulationFigures::ttft_p95)));
    if (std::isfinite(o)) {
      v.oracle_rel = o / b - 1;
      if (o < b) v.gap_recovered = (b - m) / (b - o);
    }
  }
  return v;
}

SeedFigures seed_figures(const ScenarioGroup& g) {
  SeedFigures out;
  for (const ScenarioRuns* sr : g.seeds) {
    for (std::size_t k = 0; k < sr->runs.size(); ++k) {
      out[sr->runs[k].strategy].push_back(population_figures(sr->summaries[k]));
    }
  }
  return out;
}

}  // namespace llmd::cluster
