#pragma once
// Output of the cluster benchmark: CSV files for gnuplot and the Markdown report.
#include <string>
#include <vector>

#include "bench/cluster/cluster_sim.h"
#include "bench/cluster/scenarios.h"

namespace llmd::cluster {

struct ScenarioRuns {
  Scenario scenario;
  workload::Trace trace;
  std::vector<RunResult> runs;                 // one per strategy, in strategy order
  std::vector<std::vector<Summary>> summaries;  // per run: stages then the whole run
};

struct ReportInfo {
  double total_wall_s = 0;
  int threads = 1;
  uint64_t seed = 1;
  std::string command;
  std::string machine;
  double scrape_ms = 50;
  double timeout_s = 60;
  double retrain_s = 10;
  int oracle_probes = 0;
  double oracle_horizon_ms = 0;
};

// Writes <dir>/stages.csv, <dir>/runs.csv, <dir>/data/*.csv and <dir>/report.md.
void write_outputs(const std::string& dir, const std::vector<ScenarioRuns>& all,
                   const ReportInfo& info);

// One-line summary of a run (stdout progress).
std::string one_line(const Scenario& s, const RunResult& r, const Summary& total);

}  // namespace llmd::cluster
