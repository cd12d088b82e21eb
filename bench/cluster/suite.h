#pragma once
// The generalization suite (issue 28): scenarios drawn at random from wide distributions of pool
// shapes and workloads that no pipeline was tuned on, each placed around its own saturation
// rate (found by a short round-robin probe), to measure how often the default pipeline is at
// least as good as the best heuristic. `cluster_sim --suite N --suite-seed S` runs it.
//
// SuiteGenerator is a plain, deterministic function of (suite seed, index): no simulator, no
// clock; scenario i of a seed is the same whatever N, so a larger suite extends a smaller one.
// The rest turns drawn parameters into the benchmark's own Scenario (scenarios.h) and reads
// the runs back; report writing is in suite_report.cc.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/cluster/report.h"
#include "bench/cluster/report_metrics.h"
#include "bench/cluster/scenarios.h"

namespace llmd::cluster {

// How much of the prompt requests share.
enum class Sharing {
  kUnshared,        // single-turn users without a system prompt: no shared prefix at all
  kNoSystemPrompt,  // the preset's conversations (multi-turn history) without system prompts
  kPreset,          // the preset's own sharing
  kLight,           // many groups with short system prompts (300 tokens, 100 groups)
  kHeavy,           // few groups with long system prompts (4000 tokens, 4 groups)
};
std::string_view sharing_name(Sharing s);

enum class LadderShape {
  kMonotone,  // rising from 0.15-0.3x to 1.05-1.3x saturation
  kUpDown,    // rising to a peak of 1.0-1.3x, then falling
  kBursty,    // low (0.2-0.5x) and high (1.0-1.4x) stages alternating
  kPlateau,   // one warm-up stage at half the rate, then a plateau at 1.1-1.4x
};
std::string_view ladder_name(LadderShape l);

// One drawn scenario, before its saturation rate is known.
struct SuiteParams {
  int index = 0;
  uint64_t seed = 1;  // the scenario's trace, engine and scheduling seed
  int pods = 2;       // all pods
  int mid = 0;        // of which on the mid profile
  int slow = 0;       // and on the slow profile
  std::string preset;
  std::string mix_preset;  // "" = one workload
  double mix_share = 0;    // of requests from mix_preset
  Sharing sharing = Sharing::kPreset;
  LadderShape ladder = LadderShape::kMonotone;
  std::vector<double> load;  // stage rates as multiples of the saturation rate
  double slo_share = 0;      // share of requests with SLO headers: 0, 0.5 or 1
  // SLOs as multiples of round-robin's TTFT / TPOT p90 in the probe's first (lightest) stage;
  // 0 = no such header.
  double slo_ttft_x = 0, slo_tpot_x = 0;
  double length_scale = 0.1;
  bool oracle = false;  // cheap enough to run the oracle too

  std::string name() const;      // "s007"
  std::string describe() const;  // the parameters on one line
};

struct SuiteOptions {
  int min_pods = 2, max_pods = 100;  // drawn log-uniformly
  double max_slow_share = 0.5;       // mid + slow pods, at most this share of the pool
  double min_length_scale = 0.1, max_length_scale = 1.0;  // drawn log-uniformly
  int stages = 6;
  // Virtual seconds per stage at length scale 0.1 (a stage is 10x longer at full length, so
  // that each stage holds as many requests and retrains whatever the scale).
  double stage_seconds = 4;
  double probe_stage_seconds = 2;  // the same for the saturation probe
  // Stages are shortened so that a scenario sends at most about this many requests (large
  // pools of short requests would otherwise take hours); the probe gets a third of it.
  double max_requests = 25000;
  // A run's cost grows with the tokens it simulates and hashes (requests x length scale) and
  // with the pod-time it steps, not with requests alone: stages are also shortened so that
  // requests x max(1, length scale / 0.1) stays under max_work (request-equivalents at length
  // 0.1) and pods x the ladder's virtual seconds under max_pod_seconds; the probe gets a third
  // of each. 0 = no such cap.
  double max_work = 15000;
  double max_pod_seconds = 3000;
  // No cap shortens a stage below this many retrain intervals (10 s x the length scale), so
  // that predicted-latency's model is refitted a few times per stage however large the pool.
  double min_retrains_per_stage = 2;
  // Whatever the caps leave of a stage, predicted-latency's model is refitted at least this
  // often per stage (the retrain interval is shortened to stage / this where it is longer):
  // a deployment retrains every 10 s, and a stage shorter than two retrains would judge a
  // model that never saw the stage's load (issue 51). 0 = the scaled interval as it is.
  double retrains_per_stage = 2;
  int oracle_max_pods = 12;              // the oracle runs on pools up to this size
  double oracle_max_length_scale = 0.5;  // and length scales up to this
  // ~20 scenarios in a few minutes: pools up to 24 pods, length scales up to 0.3, 3-s stages,
  // at most 8000 requests (no work or pod-time cap), no oracle.
  static SuiteOptions quick();
};

class SuiteGenerator {
 public:
  explicit SuiteGenerator(SuiteOptions options = {}) : options_(options) {}
  // Scenario `index` of suite seed `suite_seed`: a pure function of both and the options.
  SuiteParams draw(uint64_t suite_seed, int index) const;
  std::vector<SuiteParams> generate(uint64_t suite_seed, int n) const;
  const SuiteOptions& options() const { return options_; }

 private:
  SuiteOptions options_;
};

// The probe: round-robin alone on a geometric ladder (x1.6 per stage, 12 stages) from a
// quarter of an analytic guess of the pool's capacity up to 44x it.
Scenario probe_scenario(const SuiteParams& p, const SuiteOptions& o);

// Seconds per stage for a ladder offering `offered` requests per stage-second over `stages`
// stages: `wanted`, shortened by the request, work and pod-time caps of `o` (each scaled by
// `share`, 1/3 for the probe), never below 0.5 s.
double capped_stage_seconds(const SuiteParams& p, const SuiteOptions& o, double wanted,
                            double offered, int stages, double share);

struct ProbeResult {
  double saturation_rps = 0;
  double base_ttft_p90_ms = 0;  // round-robin's TTFT / TPOT p90 in the lightest probe stage
  double base_tpot_p90_ms = 0;
  bool saturated = true;  // false: no probe stage saturated (the rate is extrapolated)
};
// Runs the probe's ladder one stage longer at a time (from two stages) until a stage saturates,
// so that no run goes deep into overload: `run` replays a scenario with round-robin and returns
// its per-stage summaries. Then read_probe on the last run.
ProbeResult probe_saturation(const SuiteParams& p, const SuiteOptions& o,
                             const std::function<std::vector<Summary>(const Scenario&)>& run);
// Whether probe stage `i` is saturated: TTFT p50 above 2x or p95 above 4x the first stage's,
// or failures.
bool probe_stage_saturated(const std::vector<Summary>& sums, std::size_t i);
// Saturation = the geometric mean of the last unsaturated probe stage's rate and the next's.
ProbeResult read_probe(const Scenario& probe, const std::vector<Summary>& sums);

// The scenario to run: stages placed by the probe's saturation, SLOs from its base latencies,
// the default strategies (the two oracles only where `p.oracle`).
Scenario suite_scenario(const SuiteParams& p, const ProbeResult& probe, const SuiteOptions& o);

// --- Verdicts ---------------------------------------------------------------------------------

// "At least as good as the best heuristic": g-mean TTFT p95 within +0.5 % of the best
// heuristic's and, with SLO headers, attainment within 0.5 points of the best heuristic's.
inline constexpr double kSuiteTtftTolerance = 0.005;
inline constexpr double kSuiteSloTolerancePts = 0.5;

struct SuiteVerdict {
  bool present = false;
  double ttft_rel = 0;  // strategy / best heuristic - 1, g-mean TTFT p95
  double slo_pts = 0;   // attainment - best heuristic's, points (SLO scenarios)
  bool has_slo = false;
  bool as_good = false;
  Strategy best = Strategy::kRoundRobin;  // best heuristic by g-mean TTFT p95
  // (best - s) / (best - oracle), g-mean TTFT p95, where the oracle is the better of the
  // greedy and the cost-aware one (kOracle, kOracleCost); NaN without an oracle run or when
  // neither is better than the best heuristic (then there is no gap to recover).
  double gap_recovered = kNaN;
  double oracle_rel = kNaN;  // that oracle / best heuristic - 1 (NaN without an oracle run)
  // Past saturation (issue 28 item 4), scenarios with overload stages only: how much worse
  // than the best heuristic there (best_heuristic_overload), positive = worse: the goodput
  // shortfall (1 - mine / best) with SLO headers, else the TTFT p95 excess (mine / best - 1).
  // NaN without overload stages.
  double overload_loss = kNaN;
  bool overload_ok() const { return !(overload_loss > kSuiteTtftTolerance); }
};
SuiteVerdict suite_verdict(const ScenarioRuns& sr, Strategy s);
// A strategy's g-mean TTFT p95 over the scenario's stages (NaN when it did not run).
double suite_ttft_p95(const ScenarioRuns& sr, Strategy s);

// p-th quantile (0-1) of `v` by linear interpolation; NaN when empty.
double quantile(std::vector<double> v, double p);

struct SuiteEntry {
  SuiteParams params;
  ProbeResult probe;
};
// Writes <dir>/suite.md and <dir>/suite.csv (one row per scenario).
void write_suite(const std::string& dir, const std::vector<SuiteEntry>& entries,
                 const std::vector<ScenarioRuns>& runs, const ReportInfo& info,
                 uint64_t suite_seed);

}  // namespace llmd::cluster
