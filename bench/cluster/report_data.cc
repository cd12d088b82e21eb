// The benchmark's machine-readable outputs: stages.csv and runs.csv (every scenario, seed,
// strategy), and the inputs of plots.gp under data/.
#include <filesystem>
#include <fstream>
#include <map>

#include "bench/cluster/report.h"
#include "bench/cluster/report_metrics.h"

namespace llmd::cluster {

namespace {

void write_stage_row(std::ostream& o, const ScenarioRuns& sr, Strategy strat, const Summary& s) {
  o << sr.scenario.name << ',' << sr.scenario.seed << ',' << strategy_key(strat) << ',' << s.stage
    << ',' << s.rate << ',' << s.duration_s << ',' << s.requests << ',' << s.ok << ','
    << s.success_rate << ',' << s.ttft.mean << ',' << s.ttft.p50 << ',' << s.ttft.p95 << ','
    << s.ttft.p99 << ',' << s.tpot.p50 << ',' << s.tpot.p99 << ',' << s.ntpot.p50 << ','
    << s.ntpot.p99 << ',' << s.e2e.p50 << ',' << s.e2e.p95 << ',' << s.output_tokens_per_s << ','
    << s.prefix_hit_rate << ',' << (s.has_slo ? s.slo_attainment : -1) << ',' << s.goodput_rps
    << ',' << s.pred_ttft.n << ',' << s.pred_ttft.mape_percent << ','
    << s.pred_ttft.coverage_percent << ',' << s.pred_tpot.n << ',' << s.pred_tpot.mape_percent
    << ',' << s.pred_tpot.coverage_percent << '\n';
}

// Predicted vs actual TTFT of one run over time: sampled points, 1-s windows, retrains.
void write_prediction_series(const std::filesystem::path& data, const std::string& name,
                             const RunResult& r) {
  std::ofstream pts(data / ("pred_points_" + name + ".dat"));
  // The picked pod's feature row after the values: where the model is off, and in which state.
  pts << "# sent_s predicted_ttft_ms actual_ttft_ms predicted_tpot_ms actual_tpot_ms "
         "expected_ttft_ms kv input waiting running prefix prefill_in_flight "
         "decode_in_flight engine_cached_share\n";
  std::size_t with = 0;
  for (const auto& q : r.requests) with += (q.ok && q.predicted_ttft_ms >= 0) ? 1 : 0;
  const std::size_t step = std::max<std::size_t>(1, with / 6000);
  std::size_t c = 0;
  for (const auto& q : r.requests) {
    if (!q.ok || q.predicted_ttft_ms < 0) continue;
    if (c++ % step != 0) continue;
    const auto& f = q.picked_row;
    pts << q.sent_ms / 1000.0 << ' ' << q.predicted_ttft_ms << ' ' << q.ttft_ms << ' '
        << q.predicted_tpot_ms << ' ' << q.tpot_ms << ' ' << q.expected_ttft_ms << ' '
        << f.kv_cache_percentage << ' ' << f.input_token_length << ' ' << f.num_request_waiting
        << ' ' << f.num_request_running << ' ' << f.prefix_cache_score << ' '
        << f.prefill_tokens_in_flight << ' ' << f.decode_tokens_in_flight << ' '
        << (q.prompt_tokens > 0 ? static_cast<double>(q.cached_tokens) / q.prompt_tokens : 0.0)
        << '\n';
  }
  std::ofstream win(data / ("pred_window_" + name + ".dat"));
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
      ape += std::fabs(q->expected_ttft_ms - q->ttft_ms) / q->ttft_ms;
      cov += q->ttft_ms <= q->predicted_ttft_ms ? 1 : 0;
    }
    const Dist da = make_dist(a), dp = make_dist(p);
    win << sec + 0.5 << ' ' << da.p50 << ' ' << dp.p50 << ' ' << da.p90 << ' '
        << 100.0 * ape / qs.size() << ' ' << 100.0 * cov / qs.size() << ' ' << qs.size() << '\n';
  }
  std::ofstream rt(data / ("retrain_" + name + ".dat"));
  rt << "# t_s published version ttft_samples tpot_samples ensemble wall_s\n";
  for (const auto& x : r.retrains) {
    rt << x.time_ms / 1000.0 << ' ' << x.published << ' ' << x.version << ' ' << x.ttft_samples
       << ' ' << x.tpot_samples << ' ' << x.ensemble << ' ' << x.wall_s << '\n';
  }
}

// Per-stage values of a strategy, averaged over the seeds that ran it.
struct StageMeans {
  double rate = 0, ttft_p50 = 0, ttft_p95 = 0, ttft_p99 = 0, tpot_p50 = 0, tpot_p99 = 0,
         e2e_p50 = 0, e2e_p95 = 0, out_tok_s = 0, prefix_hit = 0, success = 0, slo = 0,
         ntpot_p50 = 0;
  int n = 0;
};

std::vector<StageMeans> stage_means(const ScenarioGroup& g, Strategy strat) {
  std::vector<StageMeans> out;
  for (const auto* sr : g.seeds) {
    const int k = find_run(*sr, strat);
    if (k < 0) continue;
    const auto& sums = sr->summaries[static_cast<std::size_t>(k)];
    out.resize(sums.size() - 1);
    for (std::size_t i = 0; i + 1 < sums.size(); ++i) {
      const Summary& s = sums[i];
      StageMeans& m = out[i];
      m.rate = s.rate;
      m.ttft_p50 += s.ttft.p50;
      m.ttft_p95 += s.ttft.p95;
      m.ttft_p99 += s.ttft.p99;
      m.tpot_p50 += s.tpot.p50;
      m.tpot_p99 += s.tpot.p99;
      m.e2e_p50 += s.e2e.p50;
      m.e2e_p95 += s.e2e.p95;
      m.out_tok_s += s.output_tokens_per_s;
      m.prefix_hit += s.prefix_hit_rate;
      m.success += s.success_rate;
      m.slo += s.has_slo ? s.slo_attainment : -1;
      m.ntpot_p50 += s.ntpot.p50;
      ++m.n;
    }
  }
  for (auto& m : out) {
    const double n = std::max(1, m.n);
    for (double* v : {&m.ttft_p50, &m.ttft_p95, &m.ttft_p99, &m.tpot_p50, &m.tpot_p99, &m.e2e_p50,
                      &m.e2e_p95, &m.out_tok_s, &m.prefix_hit, &m.success, &m.slo, &m.ntpot_p50}) {
      *v /= n;
    }
  }
  return out;
}

}  // namespace

void write_data(const std::string& out_dir, const std::vector<ScenarioRuns>& all) {
  const std::filesystem::path dir(out_dir);
  const std::filesystem::path data = dir / "data";
  std::filesystem::create_directories(data);
  std::ofstream st(dir / "stages.csv");
  st << "scenario,seed,strategy,stage,rate,duration_s,requests,ok,success_rate,ttft_mean_ms,"
        "ttft_p50_ms,ttft_p95_ms,ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,ntpot_p50_ms,ntpot_p99_ms,"
        "e2e_p50_ms,e2e_p95_ms,output_tokens_per_s,prefix_hit_rate,slo_attainment,goodput_rps,"
        "pred_ttft_n,pred_ttft_mape_pct,pred_ttft_coverage_pct,pred_tpot_n,pred_tpot_mape_pct,"
        "pred_tpot_coverage_pct\n";
  std::ofstream runs(dir / "runs.csv");
  runs << "scenario,seed,strategy,requests,virtual_s,wall_s,cpu_s,train_wall_s,retrains,cycles,"
          "cycles_with_predictions,oracle_probes,oracle_truncated,token_events\n";
  for (const auto& sr : all) {
    for (std::size_t k = 0; k < sr.runs.size(); ++k) {
      const auto& r = sr.runs[k];
      const auto& sums = sr.summaries[k];
      if (sums.empty()) continue;
      for (const auto& s : sums) write_stage_row(st, sr, r.strategy, s);
      runs << sr.scenario.name << ',' << sr.scenario.seed << ',' << strategy_key(r.strategy) << ','
           << sums.back().requests << ',' << r.end_ms / 1000.0 << ',' << r.wall_s << ','
           << sr.cpu_s[k] << ',' << r.train_wall_s << ',' << r.retrains.size() << ',' << r.cycles
           << ',' << r.cycles_with_predictions << ',' << r.oracle_probes << ','
           << r.oracle_truncated << ',' << r.token_events << '\n';
    }
  }

  const auto groups = group_by_scenario(all);
  std::ofstream quality(data / "quality.dat");
  std::ofstream lists(data / "lists.gp");
  std::string scen, ladders, pred;
  auto append = [](std::string& list, const std::string& word) {
    list += list.empty() ? word : " " + word;
  };
  int quality_blocks = 0;
  for (const auto& g : groups) {
    // Ladder file: one block per strategy (gnuplot `index`), rows = stages, seed means.
    std::ofstream lad(data / ("ladder_" + g.name + ".dat"));
    int blocks = 0;
    for (Strategy strat : strategies_of(g)) {
      ++blocks;
      lad << "\"" << strategy_name(strat)
          << "\" stage rate ttft_p50 ttft_p95 ttft_p99 "
             "tpot_p50 tpot_p99 e2e_p50 e2e_p95 out_tok_s prefix_hit success slo_attainment "
             "ntpot_p50\n";
      const auto means = stage_means(g, strat);
      for (std::size_t i = 0; i < means.size(); ++i) {
        const auto& m = means[i];
        lad << "- " << i + 1 << ' ' << m.rate << ' ' << m.ttft_p50 << ' ' << m.ttft_p95 << ' '
            << m.ttft_p99 << ' ' << m.tpot_p50 << ' ' << m.tpot_p99 << ' ' << m.e2e_p50 << ' '
            << m.e2e_p95 << ' ' << m.out_tok_s << ' ' << m.prefix_hit << ' ' << m.success << ' '
            << m.slo << ' ' << m.ntpot_p50 << '\n';
      }
      lad << "\n\n";
    }
    // Prediction quality per stage, pooled over seeds (MAPE and coverage are per-request means,
    // so the seeds are weighted by their request counts).
    std::vector<PredictionQuality> qttft, qtpot;
    std::vector<double> rate;
    auto add = [](PredictionQuality& acc, const PredictionQuality& p) {
      acc.n += p.n;
      acc.mape_percent += p.mape_percent * static_cast<double>(p.n);
      acc.coverage_percent += p.coverage_percent * static_cast<double>(p.n);
    };
    for (const auto* sr : g.seeds) {
      const int k = find_run(*sr, Strategy::kPredictedLeast);
      if (k < 0) continue;
      const auto& sums = sr->summaries[static_cast<std::size_t>(k)];
      qttft.resize(sums.size() - 1);
      qtpot.resize(sums.size() - 1);
      rate.resize(sums.size() - 1);
      for (std::size_t i = 0; i + 1 < sums.size(); ++i) {
        rate[i] = sums[i].rate;
        add(qttft[i], sums[i].pred_ttft);
        add(qtpot[i], sums[i].pred_tpot);
      }
    }
    if (!qttft.empty()) {
      ++quality_blocks;
      quality << "\"" << g.name << "\" stage rate ttft_mape ttft_cov tpot_mape tpot_cov\n";
      for (std::size_t i = 0; i < qttft.size(); ++i) {
        const double n = std::max<double>(1, static_cast<double>(qttft[i].n));
        const double nt = std::max<double>(1, static_cast<double>(qtpot[i].n));
        quality << "- " << i + 1 << ' ' << rate[i] << ' ' << qttft[i].mape_percent / n << ' '
                << qttft[i].coverage_percent / n << ' ' << qtpot[i].mape_percent / nt << ' '
                << qtpot[i].coverage_percent / nt << '\n';
      }
      quality << "\n\n";
    }
    // Predicted vs actual over time: the first seed's run (the one that keeps its requests).
    const ScenarioRuns& first = *g.seeds.front();
    if (const int k = find_run(first, Strategy::kPredictedLeast);
        k >= 0 && !first.runs[static_cast<std::size_t>(k)].requests.empty()) {
      write_prediction_series(data, g.name, first.runs[static_cast<std::size_t>(k)]);
      append(pred, g.name);
    }
    append(scen, g.name);
    if (g.scenario().ladder) append(ladders, g.name);
    // Ladders plot against the offered rate (column 3), others against the stage (column 2).
    lists << "nblocks_" << g.name << " = " << blocks << "\n";
    lists << "xcol_" << g.name << " = " << (g.scenario().ladder ? 3 : 2) << "\n";
    lists << "slo_" << g.name << " = " << (g.has_slo() ? 1 : 0) << "\n";
    if (g.scenario().slo_ttft_ms) {
      lists << "slottft_" << g.name << " = " << *g.scenario().slo_ttft_ms << "\n";
    }
  }
  lists << "scenarios = \"" << scen << "\"\n";
  lists << "ladders = \"" << ladders << "\"\n";
  lists << "predicted = \"" << pred << "\"\n";
  lists << "nquality = " << quality_blocks << "\n";
}

}  // namespace llmd::cluster
