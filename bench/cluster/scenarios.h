#pragma once
// The benchmark's scenario sets (simulator.md sections 4 and 5). Sequence lengths are scaled
// down (and KV capacity with them) so that the full set runs in minutes on two cores; the
// clocks of the EPP and the trainer are scaled by the same factor (the scenario's time scale),
// so that a scrape or a retrain sees as many requests come and go as it would at full length.
// The engine's step-time constants are not touched.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/cluster/cluster_sim.h"
#include "bench/workload/workload.h"

namespace llmd::cluster {

// Virtual seconds per stage of the default and hold-out ladders (scenarios with their own stage
// length keep it): at time scale 0.1 a stage stands for 100 s of real time and ten retrains.
// Chosen so that three seeds of the default set fit in ~25 min on 2 cores (bench/cluster/README).
inline constexpr double kDefaultStageSeconds = 10;

// The real-stack clocks that a scenario's time scale maps into virtual time.
struct TimeBase {
  double scrape_real_ms = 50;  // the EPP's metrics scrape period (0 = exact metrics)
  double retrain_real_s = 10;  // the trainer's retraining interval
};

struct Scenario {
  std::string name;    // file-safe id: A, B, C, D, sharegpt, production, slo, hetero, ...
  std::string title;   // one line for the report
  std::string preset;  // workload preset
  double length_scale = 0.1;
  // Virtual time per real time for the EPP's and trainer's clocks; 0 = length_scale (requests
  // are that much shorter, so everything that happens per second happens that much faster).
  double time_scale = 0;
  // Upper bound on the retrain interval in virtual ms (0 = none): the suite sets it so that
  // every stage sees at least two retrains where its caps shorten stages below that.
  double max_retrain_ms = 0;
  std::vector<workload::Stage> stages;  // cluster-wide rates (requests/s) and durations
  bool own_stage_length = false;        // --stage-seconds leaves these stages alone
  PoolSpec pool;                        // kv_scale is set to length_scale by make_run_config
  std::optional<double> slo_ttft_ms;
  std::optional<double> slo_tpot_ms;
  // Every request is a fresh single-turn user without a system prompt (the preset's length
  // distributions, no shared prefix at all).
  bool unshared = false;
  // Prefix sharing, when set (else the preset's): tokens of each group's system prompt before
  // length scaling (0 = none; > 0 on a preset without shared prefixes makes its single-turn
  // users share them), and the number of groups (the preset's users are spread over them).
  std::optional<int64_t> system_prompt_tokens;
  int64_t prompt_groups = 0;
  // A second preset mixed into the same arrivals (`mix_share` of the requests), with the same
  // length scale and sharing settings; "" = none.
  std::string mix_preset;
  double mix_share = 0;
  // Share of requests carrying the SLO headers (1 = every request).
  double slo_share = 1;
  // Cluster-wide rate at which round-robin saturates this pool (found by running round-robin
  // on the ladder: TTFT p50 leaves the tens of milliseconds); 0 = unknown (no split of the
  // report into below-saturation and overload stages).
  double saturation_rps = 0;
  uint64_t seed = 1;
  bool ladder = true;                // stages are a QPS ladder (plot latency vs QPS)
  std::vector<Strategy> strategies;  // empty = every strategy asked for
  std::string note;                  // extra line for the report

  double effective_time_scale() const { return time_scale > 0 ? time_scale : length_scale; }
};

struct SetOptions {
  bool quick = false;        // 2-pod pools, three 5-s stages: for tests and smoke runs
  double stage_seconds = 0;  // 0 = kDefaultStageSeconds (5 with quick)
};

// The default set: ladders on presets A-D and sharegpt, production's low/high alternation, the
// SLO run, a heterogeneous pool, a 100-pod speed check and the full-length "blog" scenario.
std::vector<Scenario> default_scenarios(const SetOptions& options);
// Pool shapes and ladders nobody tuned on (other sizes, slow-pod mixes, with and without SLO
// headers): run with --holdout to check that a result generalises.
std::vector<Scenario> holdout_scenarios(const SetOptions& options);

// Stages at or below 0.9x the saturation rate, and the others (both empty when unknown).
std::vector<int> below_saturation_stages(const Scenario& s);
std::vector<int> overload_stages(const Scenario& s);

// The scenario's trace: the preset (and the mixed-in one) with the sharing settings, lengths
// (and the context limit) scaled by `length_scale`, the given stages, seed and SLO headers.
workload::Trace make_trace(const Scenario& s);

// Virtual milliseconds between metric scrapes / retrains for a scenario.
double scrape_interval_ms(const Scenario& s, const TimeBase& t);
double retrain_interval_ms(const Scenario& s, const TimeBase& t);

// The run configuration of one strategy on a scenario: pool with kv_scale = length_scale,
// scrape and retrain intervals from the time base scaled by the scenario's time scale.
RunConfig make_run_config(const Scenario& s, Strategy strategy, const std::string& epp_config_dir,
                          const TimeBase& time = {});

}  // namespace llmd::cluster
