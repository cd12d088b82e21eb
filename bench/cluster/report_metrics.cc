#include "bench/cluster/report_metrics.h"

#include <algorithm>

namespace llmd::cluster {

namespace {

// Geometric mean of f(stage) over the given stages with requests (NaN when none).
template <typename F>
double gmean(const std::vector<Summary>& sums, const std::vector<int>& stages, F f) {
  double log_sum = 0;
  int n = 0;
  for (int st : stages) {
    const Summary& s = sums[static_cast<std::size_t>(st)];
    if (s.ttft.n == 0) continue;
    log_sum += std::log(std::max(f(s), 1e-3));
    ++n;
  }
  return n ? std::exp(log_sum / n) : kNaN;
}

template <typename F>
double mean(const std::vector<Summary>& sums, const std::vector<int>& stages, F f) {
  double sum = 0;
  int n = 0;
  for (int st : stages) {
    sum += f(sums[static_cast<std::size_t>(st)]);
    ++n;
  }
  return n ? sum / n : kNaN;
}

// MAPE and coverage are means over requests, so pooling stages weights them by request count.
PredictionQuality pooled(const std::vector<Summary>& sums, const std::vector<int>& stages) {
  PredictionQuality q;
  double mape = 0, cov = 0;
  for (int st : stages) {
    const auto& p = sums[static_cast<std::size_t>(st)].pred_ttft;
    q.n += p.n;
    mape += p.mape_percent * static_cast<double>(p.n);
    cov += p.coverage_percent * static_cast<double>(p.n);
  }
  if (q.n > 0) {
    q.mape_percent = mape / static_cast<double>(q.n);
    q.coverage_percent = cov / static_cast<double>(q.n);
  }
  return q;
}

const std::vector<Summary>* sums_of(const ScenarioRuns& sr, Strategy s) {
  const int k = find_run(sr, s);
  return k < 0 ? nullptr : &sr.summaries[static_cast<std::size_t>(k)];
}

}  // namespace

RunFigures run_figures(const Scenario& sc, const std::vector<Summary>& sums) {
  RunFigures f;
  if (sums.empty()) return f;
  std::vector<int> every;
  for (std::size_t i = 0; i + 1 < sums.size(); ++i) every.push_back(static_cast<int>(i));
  f.ttft_p50 = gmean(sums, every, [](const Summary& s) { return s.ttft.p50; });
  f.ttft_p95 = gmean(sums, every, [](const Summary& s) { return s.ttft.p95; });
  f.ttft_p99 = gmean(sums, every, [](const Summary& s) { return s.ttft.p99; });
  f.tpot_p50 = gmean(sums, every, [](const Summary& s) { return s.tpot.p50; });
  f.e2e_p95 = gmean(sums, every, [](const Summary& s) { return s.e2e.p95; });
  const Summary& t = sums.back();
  f.success = t.success_rate;
  f.out_tok_s = t.output_tokens_per_s;
  f.prefix_hit = t.prefix_hit_rate;
  f.has_slo = t.has_slo;
  f.slo_attainment = t.has_slo ? t.slo_attainment : kNaN;
  f.pred_ttft = t.pred_ttft;
  const auto below = below_saturation_stages(sc);
  const auto over = overload_stages(sc);
  if (!below.empty()) {
    f.below_ttft_p50 = gmean(sums, below, [](const Summary& s) { return s.ttft.p50; });
    f.below_ttft_p95 = gmean(sums, below, [](const Summary& s) { return s.ttft.p95; });
    f.below_pred_ttft = pooled(sums, below);
  }
  if (!over.empty()) {
    f.over_goodput_rps = mean(sums, over, [](const Summary& s) { return s.goodput_rps; });
    f.over_out_tok_s = mean(sums, over, [](const Summary& s) { return s.output_tokens_per_s; });
    f.over_success = mean(sums, over, [](const Summary& s) { return s.success_rate; });
    f.over_ttft_p95 = gmean(sums, over, [](const Summary& s) { return s.ttft.p95; });
  }
  return f;
}

std::vector<ScenarioGroup> group_by_scenario(const std::vector<ScenarioRuns>& all) {
  std::vector<ScenarioGroup> out;
  for (const auto& sr : all) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const ScenarioGroup& g) { return g.name == sr.scenario.name; });
    if (it == out.end()) {
      out.push_back({sr.scenario.name, {}});
      it = out.end() - 1;
    }
    it->seeds.push_back(&sr);
  }
  return out;
}

int find_run(const ScenarioRuns& sr, Strategy s) {
  for (std::size_t i = 0; i < sr.runs.size(); ++i) {
    if (sr.runs[i].strategy == s && !sr.summaries[i].empty()) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

std::vector<Strategy> strategies_of(const ScenarioGroup& g) {
  std::vector<Strategy> out;
  for (const auto* sr : g.seeds) {
    for (std::size_t i = 0; i < sr->runs.size(); ++i) {
      const Strategy s = sr->runs[i].strategy;
      if (!sr->summaries[i].empty() && std::find(out.begin(), out.end(), s) == out.end()) {
        out.push_back(s);
      }
    }
  }
  return out;
}

namespace {

// The heuristic minimising `key` (NaN keys never win).
template <typename Key>
int best_heuristic_by(const ScenarioRuns& sr, Key key) {
  int best = -1;
  double best_v = kNaN;
  for (std::size_t i = 0; i < sr.runs.size(); ++i) {
    if (!is_heuristic(sr.runs[i].strategy) || sr.summaries[i].empty()) continue;
    const double v = key(run_figures(sr.scenario, sr.summaries[i]));
    if (std::isnan(v)) continue;
    if (best < 0 || v < best_v) {
      best = static_cast<int>(i);
      best_v = v;
    }
  }
  return best;
}

}  // namespace

int best_heuristic_ttft(const ScenarioRuns& sr) {
  return best_heuristic_by(sr, [](const RunFigures& f) { return f.ttft_p95; });
}

int best_heuristic_slo(const ScenarioRuns& sr) {
  return best_heuristic_by(sr, [](const RunFigures& f) { return -f.slo_attainment; });
}

int best_heuristic_overload(const ScenarioRuns& sr) {
  if (overload_stages(sr.scenario).empty()) return -1;
  if (sr.scenario.slo_ttft_ms || sr.scenario.slo_tpot_ms) {
    return best_heuristic_by(sr, [](const RunFigures& f) { return -f.over_goodput_rps; });
  }
  return best_heuristic_by(sr, [](const RunFigures& f) { return f.over_ttft_p95; });
}

void Spread::add(double v) {
  if (std::isnan(v)) return;
  if (n == 0) {
    mean = min = max = v;
  } else {
    mean = (mean * n + v) / (n + 1);
    min = std::min(min, v);
    max = std::max(max, v);
  }
  ++n;
}

SeedVerdict seed_verdict(const ScenarioRuns& sr, Strategy s) {
  SeedVerdict v;
  const auto* mine = sums_of(sr, s);
  const int bt = best_heuristic_ttft(sr);
  if (mine == nullptr || bt < 0) return v;
  v.present = true;
  const RunFigures a = run_figures(sr.scenario, *mine);
  const RunFigures b = run_figures(sr.scenario, sr.summaries[static_cast<std::size_t>(bt)]);
  v.best_ttft = sr.runs[static_cast<std::size_t>(bt)].strategy;
  v.ttft_rel = a.ttft_p95 / b.ttft_p95 - 1.0;
  v.ttft_ok = a.ttft_p95 <= b.ttft_p95;
  if (a.has_slo) {
    const int bs = best_heuristic_slo(sr);
    const RunFigures c = run_figures(sr.scenario, sr.summaries[static_cast<std::size_t>(bs)]);
    v.best_slo = sr.runs[static_cast<std::size_t>(bs)].strategy;
    v.slo_pts = 100.0 * (a.slo_attainment - c.slo_attainment);
    v.slo_ok = a.slo_attainment >= c.slo_attainment;
  }
  return v;
}

GroupFigures group_figures(const ScenarioGroup& g, Strategy s) {
  GroupFigures out;
  for (const auto* sr : g.seeds) {
    const auto* sums = sums_of(*sr, s);
    if (sums == nullptr) continue;
    const RunFigures f = run_figures(sr->scenario, *sums);
    out.ttft_p95.add(f.ttft_p95);
    out.ttft_p50.add(f.ttft_p50);
    out.slo.add(f.slo_attainment);
  }
  return out;
}

GroupFigures best_heuristic_figures(const ScenarioGroup& g) {
  GroupFigures out;
  for (const auto* sr : g.seeds) {
    const int bt = best_heuristic_ttft(*sr);
    if (bt < 0) continue;
    const RunFigures f = run_figures(sr->scenario, sr->summaries[static_cast<std::size_t>(bt)]);
    out.ttft_p95.add(f.ttft_p95);
    out.ttft_p50.add(f.ttft_p50);
    if (const int bs = best_heuristic_slo(*sr); bs >= 0) {
      out.slo.add(
          run_figures(sr->scenario, sr->summaries[static_cast<std::size_t>(bs)]).slo_attainment);
    }
  }
  return out;
}

double gap_recovered(const ScenarioGroup& g, Strategy s) {
  const double bh = best_heuristic_figures(g).ttft_p95.mean;
  const double mine = group_figures(g, s).ttft_p95.mean;
  const double oracle = group_figures(g, Strategy::kOracle).ttft_p95.mean;
  if (std::isnan(bh) || std::isnan(mine) || std::isnan(oracle) || !(bh - oracle > 0)) {
    return kNaN;
  }
  return (bh - mine) / (bh - oracle);
}

double cold_share(const RunResult& r) {
  double first = -1;
  for (const auto& rt : r.retrains) {
    if (rt.published) {
      first = rt.time_ms;
      break;
    }
  }
  std::size_t cold = 0, n = 0;
  for (const auto& q : r.requests) {
    if (q.sent_ms < 0) continue;
    ++n;
    cold += (first < 0 || q.sent_ms < first) ? 1 : 0;
  }
  return n ? static_cast<double>(cold) / static_cast<double>(n) : 0;
}

double pod_spread(const RunResult& r) {
  int64_t lo = -1, hi = 0;
  for (const auto& p : r.pods) {
    lo = lo < 0 ? p.requests : std::min(lo, p.requests);
    hi = std::max(hi, p.requests);
  }
  return lo > 0 ? static_cast<double>(hi) / static_cast<double>(lo) : 0;
}

}  // namespace llmd::cluster
