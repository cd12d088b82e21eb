// report.md: setup, headline over seeds, per-seed verdicts, below-saturation and overload
// figures, diagnostics, per-stage tables, prediction quality and run costs.
#include "bench/cluster/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/cluster/report_format.h"
#include "bench/cluster/report_metrics.h"

namespace llmd::cluster {

namespace {

using namespace format;

// "mean (min-max)" over seeds; the mean alone for one seed.
std::string spread(const Spread& s, std::string (*f)(double)) {
  if (s.n == 0) return "-";
  if (s.n == 1) return f(s.mean);
  return f(s.mean) + " (" + f(s.min) + "-" + f(s.max) + ")";
}

// 1-based stage list with ranges: "1-6", "1,3,5,7".
std::string stage_list(const std::vector<int>& stages) {
  std::string out;
  for (std::size_t i = 0; i < stages.size();) {
    std::size_t j = i;
    while (j + 1 < stages.size() && stages[j + 1] == stages[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(stages[i] + 1);
    if (j > i) {
      out += j == i + 1 ? ',' : '-';
      out += std::to_string(stages[j] + 1);
    }
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

std::string seeds_text(const std::vector<uint64_t>& seeds) {
  std::string s;
  for (auto v : seeds) {
    if (!s.empty()) s += ", ";
    s += std::to_string(v);
  }
  return s;
}

const std::vector<Summary>* sums_of(const ScenarioRuns& sr, Strategy s) {
  const int k = find_run(sr, s);
  return k < 0 ? nullptr : &sr.summaries[static_cast<std::size_t>(k)];
}

bool is_predicted(Strategy s) {
  return uses_predictions(s);
}

void setup_section(std::ostream& o, const std::vector<ScenarioGroup>& groups,
                   const ReportInfo& info) {
  o << "## Setup\n\n";
  o << "| scenario | workload | pool | length scale | time scale: scrape / retrain (virtual) | "
       "stages (req/s x s) | round-robin saturates at (req/s); stages below 0.9x | requests "
       "(mean over seeds) | SLO |\n|---|---|---|---|---|---|---|---:|---|\n";
  for (const auto& g : groups) {
    const Scenario& s = g.scenario();
    std::string pool =
        std::to_string(s.pool.num_pods - s.pool.num_slow - s.pool.num_mid) + " x h100";
    if (s.pool.num_mid > 0) pool += " + " + std::to_string(s.pool.num_mid) + " x mid";
    if (s.pool.num_slow > 0) pool += " + " + std::to_string(s.pool.num_slow) + " x slow";
    std::string slo = "-";
    if (g.has_slo()) {
      slo = "TTFT " + (s.slo_ttft_ms ? ms(*s.slo_ttft_ms) : "-") + " ms, TPOT " +
            (s.slo_tpot_ms ? ms(*s.slo_tpot_ms) : "-") + " ms";
    }
    std::string title = s.title;
    if (!s.note.empty()) title += " (" + s.note + ")";
    double requests = 0;
    for (const auto* sr : g.seeds) requests += static_cast<double>(sr->trace.requests.size());
    requests /= static_cast<double>(g.seeds.size());
    const std::string sat = s.saturation_rps > 0 ? fmt("%g", s.saturation_rps) + "; " +
                                                       stage_list(below_saturation_stages(s))
                                                 : std::string("unknown");
    o << "| " << s.name << " | " << title << " | " << pool << " | " << s.length_scale << " | "
      << s.effective_time_scale() << ": " << fmt("%g ms", scrape_interval_ms(s, info.time)) << " / "
      << fmt("%g s", retrain_interval_ms(s, info.time) / 1000.0) << " | "
      << workload::format_stages(g.seeds.front()->trace.stages) << " | " << sat << " | "
      << num(requests) << " | " << slo << " |\n";
  }
  o << "\n";
  o << "Scaling (the engine's step-time constants are untouched): prompt, question and output "
       "lengths are multiplied by the *length scale*, and the KV cache (`num_gpu_blocks`) and "
       "the conversation length limit by the same factor, so KV pressure, prefix eviction and "
       "preemption stay as at full length. Requests are then that much shorter, so the EPP's "
       "and the trainer's clocks are scaled by the *time scale* (= the length scale unless a "
       "scenario says otherwise): the real stack's "
    << fmt("%g", info.time.scrape_real_ms) << "-ms metric scrape and "
    << fmt("%g", info.time.retrain_real_s)
    << "-s retraining become the virtual intervals shown. Ladders run from ~1/7 to ~1.15x the "
       "load at which round-robin saturates the pool; *below saturation* are the stages at or "
       "below 0.9x of it, the others are *overload*. Client timeout "
    << fmt("%g", info.timeout_s) << " virtual s; oracle: at most "
    << (info.oracle_probes > 0 ? std::to_string(info.oracle_probes) : std::string("all"))
    << " pods probed per request (best-estimated first), probe horizon "
    << (info.oracle_horizon_ms > 0 ? fmt("%g ms", info.oracle_horizon_ms) : std::string("none"))
    << ".\n\n";
}

void headline_section(std::ostream& o, const std::vector<ScenarioGroup>& groups, int nseeds) {
  o << "## Headline: mean over seeds (min-max)\n\n";
  o << "*g-mean*: the geometric mean over the scenario's stages of the per-stage percentile "
       "(every load level counts the same). Each cell is the mean of that value over the "
    << nseeds
    << " seed(s), with the spread (min-max) across seeds. *Best heuristic*: per seed, the "
       "heuristic (round-robin, load+prefix (1,1,1) or (3,2,2)) with the lowest g-mean TTFT "
       "p95, and for SLO attainment the one with the highest attainment. *vs best heuristic*: "
       "mean g-mean TTFT p95 against the best heuristic's mean (negative = lower). *Gap "
       "recovered* (the moonshot): (best heuristic - strategy) / (best heuristic - oracle) on "
       "the mean g-mean TTFT p95; 100% = as good as the oracle, 0% = no better than the best "
       "heuristic.\n\n";
  o << "| scenario | strategy | g-mean TTFT p95 (ms) | g-mean TTFT p50 (ms) | SLO attainment | "
       "vs best heuristic | gap recovered |\n|---|---|---:|---:|---:|---:|---:|\n";
  for (const auto& g : groups) {
    const GroupFigures bh = best_heuristic_figures(g);
    for (Strategy s : strategies_of(g)) {
      const GroupFigures f = group_figures(g, s);
      std::string vs = "", gap = "";
      if (!is_heuristic(s)) {
        vs = rel(f.ttft_p95.mean / bh.ttft_p95.mean - 1.0);
        if (g.has_slo()) vs += fmt(", SLO %+.1f pts", 100.0 * (f.slo.mean - bh.slo.mean));
      }
      if (is_predicted(s)) {
        const double r = gap_recovered(g, s);
        gap = std::isfinite(r) ? fmt("%.0f%%", 100.0 * r) : "-";
      }
      o << "| " << g.name << " | " << strategy_name(s) << " | " << spread(f.ttft_p95, ms) << " | "
        << spread(f.ttft_p50, ms) << " | " << (g.has_slo() ? spread(f.slo, pct) : "-") << " | "
        << vs << " | " << gap << " |\n";
    }
    o << "| " << g.name << " | *best heuristic (per seed)* | " << spread(bh.ttft_p95, ms) << " | "
      << spread(bh.ttft_p50, ms) << " | " << (g.has_slo() ? spread(bh.slo, pct) : "-")
      << " |  |  |\n";
  }
  o << "\n";
}

void verdict_section(std::ostream& o, const std::vector<ScenarioGroup>& groups,
                     const std::vector<uint64_t>& seeds) {
  o << "## Per seed: is predicted-latency at least as good as the best heuristic?\n\n";
  o << "Per scenario and seed: *yes* when predicted-latency's g-mean TTFT p95 is <= the best "
       "heuristic's and, in SLO scenarios, its SLO attainment is >= the best heuristic's. The "
       "cell gives the TTFT difference (and the attainment difference in points) and the "
       "heuristic it is measured against.\n\n";
  o << "| scenario |";
  for (auto s : seeds) o << " seed " << s << " |";
  o << "\n|---|";
  for (std::size_t i = 0; i < seeds.size(); ++i) o << "---|";
  o << "\n";
  for (const auto& g : groups) {
    o << "| " << g.name << " |";
    for (auto seed : seeds) {
      const ScenarioRuns* sr = nullptr;
      for (const auto* x : g.seeds) sr = x->scenario.seed == seed ? x : sr;
      const SeedVerdict v = sr ? seed_verdict(*sr, Strategy::kPredictedLeast) : SeedVerdict{};
      if (!v.present) {
        o << " - |";
        continue;
      }
      o << ' ' << (v.wins() ? "yes" : "**no**") << ": TTFT p95 " << rel(v.ttft_rel) << " ("
        << strategy_name(v.best_ttft) << ")";
      if (std::isfinite(v.slo_pts)) {
        o << ", SLO " << fmt("%+.1f pts", v.slo_pts) << " (" << strategy_name(v.best_slo) << ")";
      }
      o << " |";
    }
    o << "\n";
  }
  o << "\n";
  for (Strategy s :
       {Strategy::kPredictedLeast, Strategy::kPredictedUpstream, Strategy::kPredictedMost}) {
    int wins = 0, pairs = 0;
    std::string lost;
    for (const auto& g : groups) {
      for (const auto* sr : g.seeds) {
        const SeedVerdict v = seed_verdict(*sr, s);
        if (!v.present) continue;
        ++pairs;
        wins += v.wins() ? 1 : 0;
        if (!v.wins()) {
          if (!lost.empty()) lost += ", ";
          lost += g.name + "/" + std::to_string(sr->scenario.seed);
        }
      }
    }
    if (pairs == 0) continue;
    o << "**" << strategy_name(s) << "**: at least as good as the best heuristic in **" << wins
      << " of " << pairs << "** (scenario, seed) pairs";
    o << (lost.empty() ? ".\n\n" : "; not in " + lost + ".\n\n");
  }
}

void saturation_section(std::ostream& o, const std::vector<ScenarioGroup>& groups) {
  o << "## Below saturation and in overload (mean over seeds)\n\n";
  o << "*Below saturation*: stages at or below 0.9x the rate at which round-robin saturates "
       "the pool (Setup table): g-mean TTFT p50/p95 over those stages, and the live error of "
       "the picked pod's expected TTFT (the model's median) against the actual (MAPE, pooled "
       "over those stages' requests). *Overload*: the other stages, mean over them of the goodput "
       "(requests per "
       "second of stage time that completed within the client timeout and, with SLO headers, "
       "met their SLOs), the output tokens/s and the success rate.\n\n";
  o << "| scenario | strategy | below: TTFT p50 | below: TTFT p95 | below: live TTFT MAPE | "
       "overload: goodput req/s | overload: out tok/s | overload: success |\n"
       "|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& g : groups) {
    for (Strategy s : strategies_of(g)) {
      Spread p50, p95, mape, good, tok, ok;
      for (const auto* sr : g.seeds) {
        const auto* sums = sums_of(*sr, s);
        if (sums == nullptr) continue;
        const RunFigures f = run_figures(sr->scenario, *sums);
        p50.add(f.below_ttft_p50);
        p95.add(f.below_ttft_p95);
        if (f.below_pred_ttft.n > 0) mape.add(f.below_pred_ttft.mape_percent);
        good.add(f.over_goodput_rps);
        tok.add(f.over_out_tok_s);
        ok.add(f.over_success);
      }
      o << "| " << g.name << " | " << strategy_name(s) << " | " << ms(p50.mean) << " | "
        << ms(p95.mean) << " | " << (mape.n ? fmt("%.1f%%", mape.mean) : std::string("-")) << " | "
        << (good.n ? fmt("%.1f", good.mean) : std::string("-")) << " | " << num(tok.mean) << " | "
        << pct(ok.mean) << " |\n";
    }
  }
  o << "\n";
}

void diagnostics_section(std::ostream& o, const std::vector<ScenarioGroup>& groups) {
  o << "## Diagnostics: predicted-latency against the best heuristic (mean over seeds)\n\n";
  o << "*stages won*: stages where predicted-latency's TTFT p95 is below the best heuristic's, "
       "summed over seeds. *cold*: share of requests routed before the first trained model. "
       "*pod spread*: max/min requests per pod.\n\n";
  o << "| scenario | stages won | prefix hit (PL / BH) | live TTFT MAPE | TTFT p90 coverage | "
       "cold | pod spread (PL / BH) |\n|---|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& g : groups) {
    int won = 0, stages = 0;
    Spread hit_pl, hit_bh, mape, cov, cold, sp_pl, sp_bh;
    for (const auto* sr : g.seeds) {
      const int pl = find_run(*sr, Strategy::kPredictedLeast);
      const int bh = best_heuristic_ttft(*sr);
      if (pl < 0 || bh < 0) continue;
      const auto& a = sr->summaries[static_cast<std::size_t>(pl)];
      const auto& b = sr->summaries[static_cast<std::size_t>(bh)];
      for (std::size_t st = 0; st + 1 < a.size() && st + 1 < b.size(); ++st) {
        if (a[st].ttft.n == 0 || b[st].ttft.n == 0) continue;
        ++stages;
        won += a[st].ttft.p95 < b[st].ttft.p95 ? 1 : 0;
      }
      hit_pl.add(a.back().prefix_hit_rate);
      hit_bh.add(b.back().prefix_hit_rate);
      mape.add(a.back().pred_ttft.mape_percent);
      cov.add(a.back().pred_ttft.coverage_percent);
      cold.add(sr->cold_share[static_cast<std::size_t>(pl)]);
      sp_pl.add(pod_spread(sr->runs[static_cast<std::size_t>(pl)]));
      sp_bh.add(pod_spread(sr->runs[static_cast<std::size_t>(bh)]));
    }
    if (stages == 0) continue;
    o << "| " << g.name << " | " << won << " of " << stages << " | " << pct(hit_pl.mean) << " / "
      << pct(hit_bh.mean) << " | " << fmt("%.0f%%", mape.mean) << " | " << fmt("%.0f%%", cov.mean)
      << " | " << pct(cold.mean) << " | " << fmt("%.2f", sp_pl.mean) << " / "
      << fmt("%.2f", sp_bh.mean) << " |\n";
  }
  o << "\n";
}

void stage_section(std::ostream& o, const std::vector<ScenarioGroup>& groups) {
  o << "## Per scenario and stage (mean over seeds)\n\n";
  o << "Latencies in ms, each the mean over seeds of the stage's percentile (`stages.csv` has "
       "every seed). *success*: completed within the client timeout. *out tok/s*: output "
       "tokens of the stage's requests / time from the stage's start until its last request "
       "finished (at least the stage's length). *prefix hit*: cached / prompt tokens when the "
       "engine first scheduled the request. *pred.*: the picked pod's predicted TTFT against "
       "the actual (MAPE of the expected TTFT / coverage of the p90 bound, pooled over "
       "seeds).\n\n";
  for (const auto& g : groups) {
    const Scenario& sc = g.scenario();
    o << "### " << g.name << ": " << sc.title << "\n\n";
    o << "![latency vs load](plots/latency_" << g.name << ".png)\n";
    const auto* first = g.seeds.front();
    if (const int k = find_run(*first, Strategy::kPredictedLeast);
        k >= 0 && !first->runs[static_cast<std::size_t>(k)].requests.empty()) {
      o << "![predicted vs actual TTFT (seed " << first->scenario.seed << ")](plots/pred_" << g.name
        << ".png)\n";
    }
    o << "\n| stage | req/s | strategy | success | TTFT p50 | TTFT p95 | TTFT p99 | TPOT p50 | "
         "E2E p95 | out tok/s | prefix hit |";
    if (g.has_slo()) o << " SLO att. |";
    o << " pred. TTFT MAPE / cov. |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|";
    if (g.has_slo()) o << "---:|";
    o << "---:|\n";
    const auto strategies = strategies_of(g);
    const std::size_t nst = first->trace.stages.size();
    for (std::size_t st = 0; st <= nst; ++st) {
      for (Strategy s : strategies) {
        Spread ok, p50, p95, p99, tpot, e2e, tok, hit, slo;
        std::size_t n = 0;
        double mape = 0, cov = 0;
        int stage = -1;
        double rate = 0;
        for (const auto* sr : g.seeds) {
          const auto* sums = sums_of(*sr, s);
          if (sums == nullptr) continue;
          const Summary& x = (*sums)[st];
          stage = x.stage;
          rate = x.rate;
          ok.add(x.success_rate);
          p50.add(x.ttft.p50);
          p95.add(x.ttft.p95);
          p99.add(x.ttft.p99);
          tpot.add(x.tpot.p50);
          e2e.add(x.e2e.p95);
          tok.add(x.output_tokens_per_s);
          hit.add(x.prefix_hit_rate);
          if (x.has_slo) slo.add(x.slo_attainment);
          n += x.pred_ttft.n;
          mape += x.pred_ttft.mape_percent * static_cast<double>(x.pred_ttft.n);
          cov += x.pred_ttft.coverage_percent * static_cast<double>(x.pred_ttft.n);
        }
        if (ok.n == 0) continue;
        o << "| " << (stage < 0 ? std::string("**all**") : std::to_string(stage + 1)) << " | "
          << fmt("%.0f", rate) << " | " << strategy_name(s) << " | " << pct(ok.mean) << " | "
          << ms(p50.mean) << " | " << ms(p95.mean) << " | " << ms(p99.mean) << " | "
          << ms(tpot.mean) << " | " << ms(e2e.mean) << " | " << num(tok.mean) << " | "
          << pct(hit.mean) << " |";
        if (g.has_slo()) o << ' ' << pct(slo.mean) << " |";
        o << ' '
          << (n ? fmt("%.0f%%", mape / static_cast<double>(n)) + " / " +
                      fmt("%.0f%%", cov / static_cast<double>(n))
                : std::string("-"))
          << " |\n";
      }
    }
    o << "\n";
  }
}

void quality_section(std::ostream& o, const std::vector<ScenarioGroup>& groups) {
  o << "## Prediction quality (picked pod, mean over seeds)\n\n";
  o << "![MAPE and coverage per stage (predicted-latency)](plots/prediction_quality.png)\n\n";
  o << "The models predict the 90th percentile (the bound SLO checks use), so p90 coverage "
       "(share of actuals at or below it) should be near 90%. MAPE is measured against the "
       "expected latency (the model's median; the bound still ranks pods): a p90 bound is off "
       "the actual by its spread even when it is exact.\n\n";
  o << "| scenario | strategy | TTFT MAPE | TTFT p90 coverage | TPOT MAPE | TPOT p90 coverage | "
       "below saturation: TTFT MAPE |\n|---|---|---:|---:|---:|---:|---:|\n";
  for (const auto& g : groups) {
    for (Strategy s : strategies_of(g)) {
      if (!is_predicted(s)) continue;
      Spread tm, tc, pm, pc, bm;
      for (const auto* sr : g.seeds) {
        const auto* sums = sums_of(*sr, s);
        if (sums == nullptr) continue;
        const Summary& t = sums->back();
        tm.add(t.pred_ttft.mape_percent);
        tc.add(t.pred_ttft.coverage_percent);
        pm.add(t.pred_tpot.mape_percent);
        pc.add(t.pred_tpot.coverage_percent);
        const RunFigures f = run_figures(sr->scenario, *sums);
        if (f.below_pred_ttft.n > 0) bm.add(f.below_pred_ttft.mape_percent);
      }
      auto p = [](const Spread& x) { return x.n ? fmt("%.1f%%", x.mean) : std::string("-"); };
      o << "| " << g.name << " | " << strategy_name(s) << " | " << p(tm) << " | " << p(tc) << " | "
        << p(pm) << " | " << p(pc) << " | " << p(bm) << " |\n";
    }
  }
  o << "\n";
}

void runs_section(std::ostream& o, const std::vector<ScenarioGroup>& groups) {
  o << "## Runs (mean over seeds)\n\n";
  o << "*engine prefix hit*: the engines' own counters (prefix-cache hit tokens / queried "
       "tokens, including recomputation after preemption), summed over pods. *CPU s*: CPU time "
       "of the thread that ran it (wall time also counts waiting for a core when the machine "
       "is busy; XGBoost's OpenMP helper thread, which takes part in training, is not "
       "counted). *x real time*: virtual seconds simulated per wall second.\n\n";
  o << "| scenario | strategy | seeds | requests | virtual s | wall s | CPU s | x real time | of "
       "which training s | retrains (published) | oracle probes / decision | engine prefix hit | "
       "preemptions |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& g : groups) {
    for (Strategy s : strategies_of(g)) {
      Spread req, virt, wall, cpu, train, retrains, published, probes, hit, pre;
      for (const auto* sr : g.seeds) {
        const int k = find_run(*sr, s);
        if (k < 0) continue;
        const RunResult& r = sr->runs[static_cast<std::size_t>(k)];
        int pub = 0;
        for (const auto& x : r.retrains) pub += x.published ? 1 : 0;
        int64_t q = 0, h = 0, p = 0;
        for (const auto& pod : r.pods) {
          q += pod.prefix_queries;
          h += pod.prefix_hits;
          p += pod.preemptions;
        }
        req.add(static_cast<double>(sr->summaries[static_cast<std::size_t>(k)].back().requests));
        virt.add(r.end_ms / 1000.0);
        wall.add(r.wall_s);
        cpu.add(sr->cpu_s[static_cast<std::size_t>(k)]);
        train.add(r.train_wall_s);
        retrains.add(static_cast<double>(r.retrains.size()));
        published.add(pub);
        if (r.oracle_probes > 0) {
          probes.add(static_cast<double>(r.oracle_probes) /
                     static_cast<double>(std::max<int64_t>(1, r.cycles)));
        }
        hit.add(q > 0 ? static_cast<double>(h) / static_cast<double>(q) : 0);
        pre.add(static_cast<double>(p));
      }
      o << "| " << g.name << " | " << strategy_name(s) << " | " << req.n << " | " << num(req.mean)
        << " | " << num(virt.mean) << " | " << fmt("%.1f", wall.mean) << " | "
        << fmt("%.1f", cpu.mean) << " | " << fmt("%.1f", wall.mean > 0 ? virt.mean / wall.mean : 0)
        << " | " << fmt("%.1f", train.mean) << " | " << num(retrains.mean) << " ("
        << num(published.mean) << ") | " << (probes.n ? fmt("%.2f", probes.mean) : std::string("-"))
        << " | " << pct(hit.mean) << " | " << num(pre.mean) << " |\n";
    }
  }
  o << "\n";
}

}  // namespace

std::string one_line(const Scenario& s, const RunResult& r, const Summary& t) {
  std::ostringstream o;
  o << s.name << " seed " << s.seed << " / " << strategy_name(r.strategy) << ": "
    << r.requests.size() << " req, ok " << pct(t.success_rate) << ", TTFT p50/p95/p99 "
    << ms(t.ttft.p50) << "/" << ms(t.ttft.p95) << "/" << ms(t.ttft.p99) << " ms, TPOT p50 "
    << ms(t.tpot.p50) << " ms, E2E p95 " << ms(t.e2e.p95) << " ms, hit " << pct(t.prefix_hit_rate);
  if (t.has_slo) o << ", SLO " << pct(t.slo_attainment);
  if (t.pred_ttft.n) {
    o << ", pred TTFT MAPE " << fmt("%.0f%%", t.pred_ttft.mape_percent) << " cov "
      << fmt("%.0f%%", t.pred_ttft.coverage_percent);
  }
  o << " | virtual " << fmt("%.0f", r.end_ms / 1000.0) << " s, wall " << fmt("%.1f", r.wall_s)
    << " s";
  if (r.train_wall_s > 0) o << " (train " << fmt("%.1f", r.train_wall_s) << " s)";
  if (r.oracle_probes > 0) o << " probes " << r.oracle_probes;
  if (r.attempts_refused > 0 || r.streams_broken > 0) {
    o << " | outages: " << r.attempts_refused << " attempts refused, " << r.retries
      << " served by a retry, " << r.streams_broken << " streams broken";
  }
  return o.str();
}

void write_outputs(const std::string& out_dir, const std::vector<ScenarioRuns>& all,
                   const ReportInfo& info) {
  write_data(out_dir, all);
  const auto groups = group_by_scenario(all);
  std::ofstream o(std::filesystem::path(out_dir) / "report.md");
  o << "# Routing benchmark: predicted-latency vs heuristics vs oracle (virtual time)\n\n";
  o << "Generated by `bench/cluster/run_report.sh` (`" << info.command << "`) on " << utc_now()
    << ".\n";
  o << "Scenario set: " << info.set_name << ". Seeds: " << seeds_text(info.seeds)
    << " (each scenario, strategy and seed is one run). Machine: " << info.machine
    << ". Runs in parallel: " << info.threads
    << ". Wall time of all runs: " << fmt("%.0f", info.total_wall_s)
    << " s (CPU time: " << fmt("%.0f", info.total_cpu_s) << " s).\n\n";
  o << "Every routing decision goes through the real EPP scheduling code "
       "(`epp::SchedulingCycle` with the pipelines of `epp/config`); the predicted-latency "
       "strategies' "
       "models are trained in-process by `trainer::TrainerService` on the run's own completed "
       "requests and served through the predictor's compiled flat-forest path. Details, "
       "scaling and caveats: [bench/cluster/README.md](../../cluster/README.md).\n\n";
  setup_section(o, groups, info);
  headline_section(o, groups, static_cast<int>(info.seeds.size()));
  verdict_section(o, groups, info.seeds);
  saturation_section(o, groups);
  diagnostics_section(o, groups);
  if (info.set_name == "default") {
    if (std::ifstream disc(std::filesystem::path(LLMD_SOURCE_DIR) / "bench/cluster/discussion.md");
        disc) {
      o << disc.rdbuf() << "\n";
    }
  }
  stage_section(o, groups);
  quality_section(o, groups);
  runs_section(o, groups);
}

}  // namespace llmd::cluster
