#pragma once
// The benchmark's scenario set (simulator.md sections 4 and 5), scaled to run in minutes on two
// cores: pool size, sequence lengths (and, with them, KV capacity) and stage durations are
// scaled; the engine's step-time constants are not touched.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/cluster/cluster_sim.h"
#include "bench/workload/workload.h"

namespace llmd::cluster {

struct Scenario {
  std::string name;         // file-safe id: A, B, C, D, sharegpt, production, slo, hetero
  std::string title;        // one line for the report
  std::string preset;       // workload preset
  double length_scale = 0.1;
  std::vector<workload::Stage> stages;  // cluster-wide rates (requests/s) and durations
  PoolSpec pool;            // kv_scale is set to length_scale by make_trace's caller
  std::optional<double> slo_ttft_ms;
  std::optional<double> slo_tpot_ms;
  uint64_t seed = 1;
  bool ladder = true;       // stages are a QPS ladder (plot latency vs QPS)
  std::vector<Strategy> strategies;  // empty = every strategy asked for
  std::string note;         // extra line for the report
};

// The full set (quick = smaller pools, shorter stages: for tests and smoke runs).
std::vector<Scenario> default_scenarios(bool quick);

// The scenario's trace: the preset with lengths (and the context limit) scaled by
// `length_scale`, the given stages, seed and SLO headers.
workload::Trace make_trace(const Scenario& s);

// The run configuration of one strategy on a scenario (pool with kv_scale = length_scale).
RunConfig make_run_config(const Scenario& s, Strategy strategy, const std::string& epp_config_dir);

}  // namespace llmd::cluster
