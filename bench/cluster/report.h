#pragma once
// Output of the cluster benchmark: CSV files for gnuplot and the Markdown report.
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cluster/cluster_sim.h"
#include "bench/cluster/scenarios.h"

namespace llmd::cluster {

// One scenario on one seed.
struct ScenarioRuns {
  Scenario scenario;  // scenario.seed is this entry's seed
  workload::Trace trace;
  // One per strategy, in strategy order. `requests` is kept only where the report needs
  // single requests (the first seed: prediction plots); elsewhere it is released after the
  // summaries are made, so that three seeds of the full set stay small in memory.
  std::vector<RunResult> runs;
  std::vector<std::vector<Summary>>
      summaries;                   // per run: stages then the whole run; empty = not run
  std::vector<double> cold_share;  // per run: decisions before the first trained model
  // Per run: CPU seconds of the thread that ran it, a cost that other load on the machine
  // barely changes. XGBoost's OpenMP helper thread (up to a third of a predicted-latency
  // run's training) is not included.
  std::vector<double> cpu_s;
};

struct ReportInfo {
  double total_wall_s = 0;
  double total_cpu_s = 0;  // CPU time of the process over all runs (every thread)
  int threads = 1;
  std::vector<uint64_t> seeds;
  std::string command;
  std::string machine;
  std::string set_name = "default";  // "default", "holdout" or "custom"
  TimeBase time;
  double timeout_s = 60;
  int oracle_probes = 0;
  double oracle_horizon_ms = 0;
  int suite_oracle_max_pods = 0;  // the suite runs the oracles on pools up to this size
};

// Writes <dir>/stages.csv, <dir>/runs.csv, <dir>/data/* (gnuplot inputs) and <dir>/report.md.
// `all` holds every (scenario, seed), the seeds of one scenario next to each other.
void write_outputs(const std::string& dir, const std::vector<ScenarioRuns>& all,
                   const ReportInfo& info);
// The CSVs and gnuplot inputs alone (report_data.cc).
void write_data(const std::string& dir, const std::vector<ScenarioRuns>& all);

// One-line summary of a run (stdout progress).
std::string one_line(const Scenario& s, const RunResult& r, const Summary& total);

}  // namespace llmd::cluster
