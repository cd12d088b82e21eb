#include "bench/cluster/report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace llmd::cluster {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// Milliseconds with a sensible number of digits.
std::string ms(double v) {
  if (!std::isfinite(v)) return "-";
  if (v >= 1000) return fmt("%.0f", v);
  if (v >= 100) return fmt("%.0f", v);
  if (v >= 10) return fmt("%.1f", v);
  return fmt("%.2f", v);
}
std::string pct(double frac) { return fmt("%.1f%%", 100.0 * frac); }
std::string num(double v) { return fmt("%.0f", v); }

const Summary& total(const std::vector<Summary>& s) { return s.back(); }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
  return buf;
}

// Index of a strategy in the run list, or -1.
int find(const ScenarioRuns& sr, Strategy s) {
  for (std::size_t i = 0; i < sr.runs.size(); ++i) {
    if (sr.runs[i].strategy == s && !sr.summaries[i].empty()) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// Geometric means over the stages of per-stage percentiles.
struct Headline {
  double ttft_p50 = 0, ttft_p95 = 0, ttft_p99 = 0, tpot_p50 = 0, e2e_p95 = 0;
};
Headline headline(const std::vector<Summary>& sums) {
  double l[5] = {0, 0, 0, 0, 0};
  int n = 0;
  for (const auto& s : sums) {
    if (s.stage < 0 || s.ttft.n == 0) continue;
    const double v[5] = {s.ttft.p50, s.ttft.p95, s.ttft.p99, s.tpot.p50, s.e2e.p95};
    for (int i = 0; i < 5; ++i) l[i] += std::log(std::max(v[i], 1e-3));
    ++n;
  }
  Headline h;
  if (n == 0) return h;
  h.ttft_p50 = std::exp(l[0] / n);
  h.ttft_p95 = std::exp(l[1] / n);
  h.ttft_p99 = std::exp(l[2] / n);
  h.tpot_p50 = std::exp(l[3] / n);
  h.e2e_p95 = std::exp(l[4] / n);
  return h;
}

// The headline's ranking metric, lower is better: g-mean over stages of TTFT p95, or with
// SLOs the whole-run SLO attainment (negated).
double rank_value(const std::vector<Summary>& sums) {
  const Summary& t = total(sums);
  return t.has_slo ? -t.slo_attainment : headline(sums).ttft_p95;
}

int best_heuristic(const ScenarioRuns& sr) {
  int best = -1;
  for (std::size_t i = 0; i < sr.runs.size(); ++i) {
    if (!is_heuristic(sr.runs[i].strategy) || sr.summaries[i].empty()) continue;
    if (best < 0 ||
        rank_value(sr.summaries[i]) < rank_value(sr.summaries[static_cast<std::size_t>(best)])) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

// Share of a run's decisions made before the first trained (non-default) model was published.
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

// Max/min requests per pod (load spread), over pods of the fast class only when mixed.
double pod_spread(const RunResult& r) {
  int64_t lo = -1, hi = 0;
  for (const auto& p : r.pods) {
    lo = lo < 0 ? p.requests : std::min(lo, p.requests);
    hi = std::max(hi, p.requests);
  }
  return lo > 0 ? static_cast<double>(hi) / static_cast<double>(lo) : 0;
}

std::string rel(double a, double b) {  // a vs b, "+12%" means a is 12% higher
  if (!(b > 0)) return "-";
  return fmt("%+.0f%%", 100.0 * (a / b - 1.0));
}

void write_stage_row(std::ostream& o, const std::string& scen, const std::string& strat,
                     const Summary& s) {
  o << scen << ',' << strat << ',' << s.stage << ',' << s.rate << ',' << s.duration_s << ','
    << s.requests << ',' << s.ok << ',' << s.success_rate << ',' << s.ttft.mean << ','
    << s.ttft.p50 << ',' << s.ttft.p95 << ',' << s.ttft.p99 << ',' << s.tpot.p50 << ','
    << s.tpot.p99 << ',' << s.ntpot.p50 << ',' << s.ntpot.p99 << ',' << s.e2e.p50 << ','
    << s.e2e.p95 << ',' << s.output_tokens_per_s << ',' << s.prefix_hit_rate << ','
    << (s.has_slo ? s.slo_attainment : -1) << ',' << (s.has_slo ? s.goodput_rps : -1) << ','
    << s.pred_ttft.n << ',' << s.pred_ttft.mape_percent << ',' << s.pred_ttft.coverage_percent
    << ',' << s.pred_tpot.n << ',' << s.pred_tpot.mape_percent << ','
    << s.pred_tpot.coverage_percent << '\n';
}

void write_csvs(const std::filesystem::path& dir, const std::vector<ScenarioRuns>& all) {
  std::filesystem::create_directories(dir / "data");
  std::ofstream st(dir / "stages.csv");
  st << "scenario,strategy,stage,rate,duration_s,requests,ok,success_rate,ttft_mean_ms,"
        "ttft_p50_ms,ttft_p95_ms,ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,ntpot_p50_ms,ntpot_p99_ms,"
        "e2e_p50_ms,e2e_p95_ms,output_tokens_per_s,prefix_hit_rate,slo_attainment,goodput_rps,"
        "pred_ttft_n,pred_ttft_mape_pct,pred_ttft_coverage_pct,pred_tpot_n,pred_tpot_mape_pct,"
        "pred_tpot_coverage_pct\n";
  std::ofstream runs(dir / "runs.csv");
  runs << "scenario,strategy,requests,virtual_s,wall_s,train_wall_s,retrains,cycles,"
          "cycles_with_predictions,oracle_probes,oracle_truncated,token_events\n";
  std::ofstream quality(dir / "data" / "quality.dat");
  for (const auto& sr : all) {
    const std::string& name = sr.scenario.name;
    // Ladder file: one block per strategy (gnuplot `index`), rows = stages.
    std::ofstream lad(dir / "data" / ("ladder_" + name + ".dat"));
    for (std::size_t k = 0; k < sr.runs.size(); ++k) {
      const auto& r = sr.runs[k];
      const auto& sums = sr.summaries[k];
      if (sums.empty()) continue;
      for (const auto& s : sums) {
        write_stage_row(st, name, std::string(strategy_key(r.strategy)), s);
      }
      runs << name << ',' << strategy_key(r.strategy) << ',' << r.requests.size() << ','
           << r.end_ms / 1000.0 << ',' << r.wall_s << ',' << r.train_wall_s << ','
           << r.retrains.size() << ',' << r.cycles << ',' << r.cycles_with_predictions << ','
           << r.oracle_probes << ',' << r.oracle_truncated << ',' << r.token_events << '\n';
      // First row of a block = its title (gnuplot: title columnheader(1)).
      lad << "\"" << strategy_name(r.strategy) << "\" stage rate ttft_p50 ttft_p95 ttft_p99 "
             "tpot_p50 tpot_p99 e2e_p50 e2e_p95 out_tok_s prefix_hit success slo_attainment "
             "ntpot_p50\n";
      for (const auto& s : sums) {
        if (s.stage < 0) continue;
        lad << "- " << s.stage + 1 << ' ' << s.rate << ' ' << s.ttft.p50 << ' ' << s.ttft.p95 << ' '
            << s.ttft.p99 << ' ' << s.tpot.p50 << ' ' << s.tpot.p99 << ' ' << s.e2e.p50 << ' '
            << s.e2e.p95 << ' ' << s.output_tokens_per_s << ' ' << s.prefix_hit_rate << ' '
            << s.success_rate << ' ' << (s.has_slo ? s.slo_attainment : -1) << ' '
            << s.ntpot.p50 << '\n';
      }
      lad << "\n\n";
      if (r.strategy == Strategy::kPredictedLeast) {
        quality << "\"" << name << "\" stage rate ttft_mape ttft_cov tpot_mape tpot_cov\n";
        for (const auto& s : sums) {
          if (s.stage < 0) continue;
          quality << "- " << s.stage + 1 << ' ' << s.rate << ' ' << s.pred_ttft.mape_percent << ' '
                  << s.pred_ttft.coverage_percent << ' ' << s.pred_tpot.mape_percent << ' '
                  << s.pred_tpot.coverage_percent << '\n';
        }
        quality << "\n\n";
        // Predicted vs actual over time: sampled points and 1-s window medians.
        std::ofstream pts(dir / "data" / ("pred_points_" + name + ".dat"));
        pts << "# sent_s predicted_ttft_ms actual_ttft_ms predicted_tpot_ms actual_tpot_ms\n";
        std::size_t with = 0;
        for (const auto& q : r.requests) with += (q.ok && q.predicted_ttft_ms >= 0) ? 1 : 0;
        const std::size_t step = std::max<std::size_t>(1, with / 6000);
        std::size_t c = 0;
        for (const auto& q : r.requests) {
          if (!q.ok || q.predicted_ttft_ms < 0) continue;
          if (c++ % step != 0) continue;
          pts << q.sent_ms / 1000.0 << ' ' << q.predicted_ttft_ms << ' ' << q.ttft_ms << ' '
              << q.predicted_tpot_ms << ' ' << q.tpot_ms << '\n';
        }
        std::ofstream win(dir / "data" / ("pred_window_" + name + ".dat"));
        win << "# t_s actual_ttft_p50 predicted_ttft_p50 actual_ttft_p90 ttft_mape ttft_cov n\n";
        std::map<long, std::vector<const RequestResult*>> buckets;
        for (const auto& q : r.requests) {
          if (!q.ok || q.predicted_ttft_ms < 0) continue;
          buckets[static_cast<long>(q.sent_ms / 1000.0)].push_back(&q);
        }
        for (const auto& [sec, qs] : buckets) {
          std::vector<double> a, p;
          double ape = 0;
          std::size_t cov = 0;
          for (const auto* q : qs) {
            a.push_back(q->ttft_ms);
            p.push_back(q->predicted_ttft_ms);
            ape += std::fabs(q->predicted_ttft_ms - q->ttft_ms) / q->ttft_ms;
            cov += q->ttft_ms <= q->predicted_ttft_ms ? 1 : 0;
          }
          const Dist da = make_dist(a), dp = make_dist(p);
          win << sec + 0.5 << ' ' << da.p50 << ' ' << dp.p50 << ' ' << da.p90 << ' '
              << 100.0 * ape / qs.size() << ' ' << 100.0 * cov / qs.size() << ' ' << qs.size()
              << '\n';
        }
        std::ofstream rt(dir / "data" / ("retrain_" + name + ".dat"));
        rt << "# t_s published version ttft_samples tpot_samples ensemble wall_s\n";
        for (const auto& x : r.retrains) {
          rt << x.time_ms / 1000.0 << ' ' << x.published << ' ' << x.version << ' '
             << x.ttft_samples << ' ' << x.tpot_samples << ' ' << x.ensemble << ' ' << x.wall_s
             << '\n';
        }
      }
    }
  }
  // Scenario and strategy lists for the gnuplot script.
  auto append = [](std::string& list, std::string_view word) {
    if (!list.empty()) {
      list += ' ';
    }
    list += word;
  };
  std::string scen, ladders, pred;
  for (const auto& sr : all) {
    append(scen, sr.scenario.name);
    if (sr.scenario.ladder) {
      append(ladders, sr.scenario.name);
    }
    if (find(sr, Strategy::kPredictedLeast) >= 0) {
      append(pred, sr.scenario.name);
    }
  }
  std::ofstream lists(dir / "data" / "lists.gp");
  lists << "scenarios = \"" << scen << "\"\n";
  lists << "ladders = \"" << ladders << "\"\n";
  lists << "predicted = \"" << pred << "\"\n";
  int quality_blocks = 0;
  for (const auto& sr : all) {
    int blocks = 0;
    for (const auto& sums : sr.summaries) blocks += sums.empty() ? 0 : 1;
    // Ladders plot against the offered rate (column 3), others against the stage (column 2).
    lists << "nblocks_" << sr.scenario.name << " = " << blocks << "\n";
    lists << "xcol_" << sr.scenario.name << " = " << (sr.scenario.ladder ? 3 : 2) << "\n";
    lists << "slo_" << sr.scenario.name << " = "
          << (sr.scenario.slo_ttft_ms || sr.scenario.slo_tpot_ms ? 1 : 0) << "\n";
    if (sr.scenario.slo_ttft_ms) {
      lists << "slottft_" << sr.scenario.name << " = " << *sr.scenario.slo_ttft_ms << "\n";
    }
    quality_blocks += find(sr, Strategy::kPredictedLeast) >= 0 ? 1 : 0;
  }
  lists << "nquality = " << quality_blocks << "\n";
}

void stage_table(std::ostream& o, const ScenarioRuns& sr) {
  const bool slo = sr.scenario.slo_ttft_ms || sr.scenario.slo_tpot_ms;
  o << "| stage | req/s | strategy | success | TTFT p50 | TTFT p95 | TTFT p99 | TPOT p50 | "
       "TPOT p99 | NTPOT p50 | E2E p50 | E2E p95 | out tok/s | prefix hit |";
  if (slo) o << " SLO att. | goodput req/s |";
  o << " pred. TTFT MAPE / cov. | pred. TPOT MAPE / cov. |\n";
  o << "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";
  if (slo) o << "---:|---:|";
  o << "---:|---:|\n";
  const std::size_t stages = sr.trace.stages.size();
  for (std::size_t st = 0; st <= stages; ++st) {
    for (std::size_t k = 0; k < sr.runs.size(); ++k) {
      if (sr.summaries[k].empty()) continue;
      const Summary& s = sr.summaries[k][st];
      o << "| " << (s.stage < 0 ? std::string("**all**") : std::to_string(s.stage + 1)) << " | "
        << fmt("%.0f", s.rate) << " | " << strategy_name(sr.runs[k].strategy) << " | "
        << pct(s.success_rate) << " | " << ms(s.ttft.p50) << " | " << ms(s.ttft.p95) << " | "
        << ms(s.ttft.p99) << " | " << ms(s.tpot.p50) << " | " << ms(s.tpot.p99) << " | "
        << ms(s.ntpot.p50) << " | " << ms(s.e2e.p50) << " | " << ms(s.e2e.p95) << " | "
        << num(s.output_tokens_per_s) << " | " << pct(s.prefix_hit_rate) << " |";
      if (slo) o << ' ' << pct(s.slo_attainment) << " | " << fmt("%.1f", s.goodput_rps) << " |";
      auto pq = [](const PredictionQuality& q) {
        return q.n ? fmt("%.0f%%", q.mape_percent) + " / " + fmt("%.0f%%", q.coverage_percent)
                   : std::string("-");
      };
      o << ' ' << pq(s.pred_ttft) << " | " << pq(s.pred_tpot) << " |\n";
    }
  }
}

}  // namespace

std::string one_line(const Scenario& s, const RunResult& r, const Summary& t) {
  std::ostringstream o;
  o << s.name << " / " << strategy_name(r.strategy) << ": " << r.requests.size() << " req, ok "
    << pct(t.success_rate) << ", TTFT p50/p95/p99 " << ms(t.ttft.p50) << "/" << ms(t.ttft.p95)
    << "/" << ms(t.ttft.p99) << " ms, TPOT p50 " << ms(t.tpot.p50) << " ms, E2E p95 "
    << ms(t.e2e.p95) << " ms, hit " << pct(t.prefix_hit_rate);
  if (t.has_slo) o << ", SLO " << pct(t.slo_attainment);
  if (t.pred_ttft.n) {
    o << ", pred TTFT MAPE " << fmt("%.0f%%", t.pred_ttft.mape_percent) << " cov "
      << fmt("%.0f%%", t.pred_ttft.coverage_percent);
  }
  o << " | virtual " << fmt("%.0f", r.end_ms / 1000.0) << " s, wall " << fmt("%.1f", r.wall_s)
    << " s";
  if (r.train_wall_s > 0) o << " (train " << fmt("%.1f", r.train_wall_s) << " s)";
  if (r.oracle_probes > 0) o << " probes " << r.oracle_probes;
  return o.str();
}

void write_outputs(const std::string& out_dir, const std::vector<ScenarioRuns>& all,
                   const ReportInfo& info) {
  const std::filesystem::path dir(out_dir);
  write_csvs(dir, all);
  std::ofstream o(dir / "report.md");
  o << "# Routing benchmark: predicted-latency vs heuristics vs oracle (virtual time)\n\n";
  o << "Generated by `bench/cluster/run_report.sh` (`" << info.command << "`) on "
    << utc_now() << ".\n";
  o << "Machine: " << info.machine << ". Runs in parallel: " << info.threads
    << ". Seed: " << info.seed << ". Wall time of all runs: " << fmt("%.0f", info.total_wall_s)
    << " s.\n\n";
  o << "Every routing decision goes through the real EPP scheduling code "
       "(`epp::Director` with the pipelines of `epp/config`); predicted-latency's models are "
       "trained in-process by `trainer::TrainerService` on the run's own completed requests "
       "and served through the predictor's compiled flat-forest path. Details, scaling and "
       "caveats: [bench/cluster/README.md](../../cluster/README.md).\n\n";

  // ---- Setup --------------------------------------------------------------------------------
  o << "## Setup\n\n";
  o << "| scenario | workload | pool | length scale (KV scale) | stages (req/s x s) | requests | "
       "SLO |\n|---|---|---|---|---|---:|---|\n";
  for (const auto& sr : all) {
    const auto& s = sr.scenario;
    std::string pool = std::to_string(s.pool.num_pods - s.pool.num_slow) + " x h100";
    if (s.pool.num_slow > 0) pool += " + " + std::to_string(s.pool.num_slow) + " x slow";
    std::string slo = "-";
    if (s.slo_ttft_ms || s.slo_tpot_ms) {
      slo = "TTFT " + (s.slo_ttft_ms ? ms(*s.slo_ttft_ms) : "-") + " ms, TPOT " +
            (s.slo_tpot_ms ? ms(*s.slo_tpot_ms) : "-") + " ms";
    }
    std::string title = s.title;
    if (!s.note.empty()) title += " (" + s.note + ")";
    o << "| " << s.name << " | " << title << " | " << pool << " | " << s.length_scale << " ("
      << s.length_scale << ") | " << workload::format_stages(sr.trace.stages) << " | "
      << sr.trace.requests.size() << " | " << slo << " |\n";
  }
  o << "\n";

  o << "Scaling (the engine's step-time constants are untouched): pools of 10 pods (scale100: "
       "100); prompt, question and output lengths multiplied by the *length scale*, and the "
       "KV cache (`num_gpu_blocks`) and the conversation length limit by the same factor, so "
       "KV pressure, prefix eviction and preemption stay as at full length; 15-s stages "
       "(scale100: 10 s). Ladders run from ~1/7 to ~1.15x the load at which round-robin "
       "saturates the pool. Metrics scraped every "
    << fmt("%g", info.scrape_ms) << " ms of virtual time; predicted-latency retrained every "
    << fmt("%g", info.retrain_s) << " virtual s; client timeout " << fmt("%g", info.timeout_s)
    << " s; oracle: at most "
    << (info.oracle_probes > 0 ? std::to_string(info.oracle_probes) : std::string("all"))
    << " pods probed per request (best-estimated first), probe horizon "
    << (info.oracle_horizon_ms > 0 ? fmt("%g ms", info.oracle_horizon_ms) : std::string("none"))
    << ".\n\n";

  // ---- Headline -----------------------------------------------------------------------------
  o << "## Headline: predicted-latency vs the best heuristic vs the oracle\n\n";
  o << "Latency columns are the **geometric mean over the scenario's stages** of the per-stage "
       "percentile (every load level counts the same; whole-run percentiles would be decided by "
       "the saturated top stages alone, where every strategy is equally overloaded). Success, "
       "output tokens/s, prefix hit and SLO attainment are whole-run values. *Best heuristic* = "
       "the heuristic (round-robin, load+prefix (1,1,1) or (3,2,2)) with the lowest g-mean "
       "TTFT p95; in the SLO scenario, the highest SLO attainment. The last column compares "
       "predicted-latency with it (negative = predicted-latency lower).\n\n";
  o << "| scenario | strategy | success | TTFT p50 | TTFT p95 | TTFT p99 | TPOT p50 | E2E p95 | "
       "out tok/s | prefix hit | SLO att. | predicted-latency vs best heuristic |\n";
  o << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  std::vector<std::string> verdicts;
  for (const auto& sr : all) {
    const int pl = find(sr, Strategy::kPredictedLeast);
    const int bh = best_heuristic(sr);
    const int orc = find(sr, Strategy::kOracle);
    auto row = [&](int k, const std::string& label, const std::string& cmp) {
      if (k < 0) return;
      const auto& sums = sr.summaries[static_cast<std::size_t>(k)];
      const Summary& t = total(sums);
      const Headline h = headline(sums);
      o << "| " << sr.scenario.name << " | " << label << " | " << pct(t.success_rate) << " | "
        << ms(h.ttft_p50) << " | " << ms(h.ttft_p95) << " | " << ms(h.ttft_p99) << " | "
        << ms(h.tpot_p50) << " | " << ms(h.e2e_p95) << " | " << num(t.output_tokens_per_s)
        << " | " << pct(t.prefix_hit_rate) << " | " << (t.has_slo ? pct(t.slo_attainment) : "-")
        << " | " << cmp << " |\n";
    };
    std::string cmp = "-";
    if (pl >= 0 && bh >= 0) {
      const auto& psums = sr.summaries[static_cast<std::size_t>(pl)];
      const auto& bsums = sr.summaries[static_cast<std::size_t>(bh)];
      const Summary& a = total(psums);
      const Summary& b = total(bsums);
      const Headline ha = headline(psums), hb = headline(bsums);
      if (a.has_slo) {
        cmp = "SLO att. " + fmt("%+.1f", 100.0 * (a.slo_attainment - b.slo_attainment)) +
              " pts; TTFT p95 " + rel(ha.ttft_p95, hb.ttft_p95);
      } else {
        cmp = "TTFT p50 " + rel(ha.ttft_p50, hb.ttft_p50) + ", p95 " +
              rel(ha.ttft_p95, hb.ttft_p95) + ", p99 " + rel(ha.ttft_p99, hb.ttft_p99) +
              "; TPOT p50 " + rel(ha.tpot_p50, hb.tpot_p50) + "; E2E p95 " +
              rel(ha.e2e_p95, hb.e2e_p95);
      }
      const bool wins = rank_value(psums) < rank_value(bsums);
      // Stage by stage: where is predicted-latency's TTFT p95 below the best heuristic's?
      int stage_wins = 0, stages = 0;
      for (std::size_t st = 0; st + 1 < psums.size() && st + 1 < bsums.size(); ++st) {
        if (psums[st].ttft.n == 0 || bsums[st].ttft.n == 0) continue;
        ++stages;
        stage_wins += psums[st].ttft.p95 < bsums[st].ttft.p95 ? 1 : 0;
      }
      std::ostringstream v;
      v << "- **" << sr.scenario.name << "**: predicted-latency "
        << (wins ? "beats" : "does **not** beat") << " the best heuristic ("
        << strategy_name(sr.runs[static_cast<std::size_t>(bh)].strategy) << ") on "
        << (a.has_slo ? "SLO attainment (" + pct(a.slo_attainment) + " vs " +
                            pct(b.slo_attainment) + ")"
                      : "g-mean TTFT p95 (" + ms(ha.ttft_p95) + " vs " + ms(hb.ttft_p95) + " ms)")
        << "; lower TTFT p95 in " << stage_wins << " of " << stages << " stages. Diagnostics: "
        << "prefix hit " << pct(a.prefix_hit_rate) << " vs " << pct(b.prefix_hit_rate)
        << "; picked pod's predicted TTFT: MAPE " << fmt("%.0f%%", a.pred_ttft.mape_percent)
        << ", p90 coverage " << fmt("%.0f%%", a.pred_ttft.coverage_percent) << "; "
        << pct(cold_share(sr.runs[static_cast<std::size_t>(pl)]))
        << " of requests routed before the first trained model; requests per pod max/min "
        << fmt("%.2f", pod_spread(sr.runs[static_cast<std::size_t>(pl)])) << " vs "
        << fmt("%.2f", pod_spread(sr.runs[static_cast<std::size_t>(bh)])) << ".";
      if (orc >= 0) {
        const Headline hc = headline(sr.summaries[static_cast<std::size_t>(orc)]);
        v << " Oracle g-mean TTFT p95 " << ms(hc.ttft_p95) << " ms.";
      }
      verdicts.push_back(v.str());
    }
    row(pl, "predicted-latency", cmp);
    if (bh >= 0) {
      row(bh, "best heuristic: " + std::string(strategy_name(sr.runs[bh].strategy)), "");
    }
    row(orc, "oracle", "");
  }
  o << "\n### Verdicts\n\n";
  for (const auto& v : verdicts) o << v << "\n";
  o << "\n";
  if (std::ifstream disc(std::filesystem::path(LLMD_SOURCE_DIR) / "bench/cluster/discussion.md");
      disc) {
    o << disc.rdbuf() << "\n";
  }

  // ---- Per scenario -------------------------------------------------------------------------
  o << "## Per scenario and stage\n\n";
  o << "Latencies in ms. *success*: completed within the client timeout. *out tok/s*: output "
       "tokens of the stage's requests / time from the stage's start until its last request "
       "finished (at least the stage's length). *prefix hit*: "
       "cached / prompt tokens when the engine first scheduled the request. *pred.*: the picked "
       "pod's predicted TTFT/TPOT against the actual (MAPE; p90 coverage = share of actuals at "
       "or below the prediction, the models predict the 90th percentile).\n\n";
  for (const auto& sr : all) {
    o << "### " << sr.scenario.name << ": " << sr.scenario.title << "\n\n";
    const int pl = find(sr, Strategy::kPredictedLeast);
    const int pm = find(sr, Strategy::kPredictedMost);
    if (pl >= 0 && pm >= 0) {
      const auto& a = sr.runs[static_cast<std::size_t>(pl)].requests;
      const auto& b = sr.runs[static_cast<std::size_t>(pm)].requests;
      bool same = a.size() == b.size();
      for (std::size_t i = 0; same && i < a.size(); ++i) {
        same = a[i].pod == b[i].pod && a[i].ttft_ms == b[i].ttft_ms;
      }
      if (same) {
        o << "predicted-latency(most) made exactly the decisions of predicted-latency (least): "
             "without SLO headers no pod has positive headroom, and negative-headroom buckets "
             "are always scored *least* (epp/plugins/scorer/latency).\n\n";
      }
    }
    o << "![latency vs load](plots/latency_" << sr.scenario.name << ".png)\n";
    if (find(sr, Strategy::kPredictedLeast) >= 0) {
      o << "![predicted vs actual TTFT](plots/pred_" << sr.scenario.name << ".png)\n";
    }
    o << "\n";
    stage_table(o, sr);
    o << "\n";
  }

  // ---- Prediction quality ---------------------------------------------------------------------
  o << "## Prediction quality (predicted-latency, least)\n\n";
  o << "![MAPE and coverage](plots/prediction_quality.png)\n\n";
  o << "| scenario | stage | req/s | n | TTFT MAPE | TTFT p90 coverage | TPOT MAPE | TPOT p90 "
       "coverage |\n|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& sr : all) {
    const int pl = find(sr, Strategy::kPredictedLeast);
    if (pl < 0) continue;
    for (const auto& s : sr.summaries[static_cast<std::size_t>(pl)]) {
      o << "| " << sr.scenario.name << " | "
        << (s.stage < 0 ? std::string("all") : std::to_string(s.stage + 1)) << " | "
        << fmt("%.0f", s.rate) << " | " << s.pred_ttft.n << " | "
        << fmt("%.1f%%", s.pred_ttft.mape_percent) << " | "
        << fmt("%.1f%%", s.pred_ttft.coverage_percent) << " | "
        << fmt("%.1f%%", s.pred_tpot.mape_percent) << " | "
        << fmt("%.1f%%", s.pred_tpot.coverage_percent) << " |\n";
    }
  }
  o << "\n";

  // ---- Runs ---------------------------------------------------------------------------------
  o << "## Runs\n\n";
  o << "*engine prefix hit*: the engines' own counters (prefix-cache hit tokens / queried "
       "tokens, including recomputation after preemption), summed over pods. *x real time*: "
       "virtual seconds simulated per wall second.\n\n";
  o << "| scenario | strategy | requests | virtual s | wall s | x real time | of which "
       "training s | retrains (published) | oracle probes / decision | engine prefix hit | "
       "preemptions |\n"
       "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& sr : all) {
    for (const auto& r : sr.runs) {
      if (r.requests.empty()) continue;
      int published = 0;
      for (const auto& x : r.retrains) published += x.published ? 1 : 0;
      int64_t q = 0, h = 0, pre = 0;
      for (const auto& p : r.pods) {
        q += p.prefix_queries;
        h += p.prefix_hits;
        pre += p.preemptions;
      }
      o << "| " << sr.scenario.name << " | " << strategy_name(r.strategy) << " | "
        << r.requests.size() << " | " << fmt("%.0f", r.end_ms / 1000.0) << " | "
        << fmt("%.1f", r.wall_s) << " | "
        << fmt("%.1f", r.wall_s > 0 ? r.end_ms / 1000.0 / r.wall_s : 0) << " | "
        << fmt("%.1f", r.train_wall_s) << " | "
        << r.retrains.size() << " (" << published << ") | "
        << (r.oracle_probes > 0 ? fmt("%.2f", static_cast<double>(r.oracle_probes) /
                                                  static_cast<double>(std::max<int64_t>(1, r.cycles)))
                                : std::string("-"))
        << " | " << pct(q > 0 ? static_cast<double>(h) / static_cast<double>(q) : 0) << " | "
        << pre << " |\n";
    }
  }
  o << "\n";
}

}  // namespace llmd::cluster
