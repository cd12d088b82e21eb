#include "bench/cluster/suite.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace llmd::cluster {

namespace {

// splitmix64: the draws must not depend on the standard library's distributions, whose
// algorithms are implementation-defined.
uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Draw {
 public:
  explicit Draw(uint64_t seed) : state_(seed) {}
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
  double log_uniform(double lo, double hi) { return std::exp(uniform(std::log(lo), std::log(hi))); }
  int below(int n) { return static_cast<int>(unit() * n); }  // [0, n)

 private:
  uint64_t next() { return state_ = splitmix(state_); }
  uint64_t state_;
};

const std::vector<std::string>& suite_presets() {
  static const std::vector<std::string> p = workload::preset_names();
  return p;
}

// Requests/s one h100 pod sustains on a preset at length scale 0.1 under round-robin, from the
// default set's measured knees (sharegpt extrapolated from full length). Only a starting point
// for the probe, which spans 16x around it.
double per_pod_guess(const std::string& preset) {
  if (preset == "A") return 68;
  if (preset == "B") return 28;
  if (preset == "C") return 14;
  if (preset == "D") return 8.2;
  if (preset == "sharegpt") return 400;
  return 35;  // production
}

double round_sig(double v, int digits) {
  if (!(v > 0)) return v;
  const double mag = std::pow(10.0, digits - 1 - static_cast<int>(std::floor(std::log10(v))));
  return std::round(v * mag) / mag;
}

double stage_scale(const SuiteParams& p) {
  return std::max(1.0, p.length_scale / 0.1);
}

void apply_shape(const SuiteParams& p, Scenario& s) {
  s.preset = p.preset;
  s.mix_preset = p.mix_preset;
  s.mix_share = p.mix_preset.empty() ? 0 : p.mix_share;
  s.length_scale = p.length_scale;
  s.pool.num_pods = p.pods;
  s.pool.num_mid = p.mid;
  s.pool.num_slow = p.slow;
  s.seed = p.seed;
  switch (p.sharing) {
    case Sharing::kUnshared:
      s.unshared = true;
      break;
    case Sharing::kNoSystemPrompt:
      s.system_prompt_tokens = 0;
      break;
    case Sharing::kPreset:
      break;
    case Sharing::kLight:
      s.system_prompt_tokens = 300;
      s.prompt_groups = 100;
      break;
    case Sharing::kHeavy:
      s.system_prompt_tokens = 4000;
      s.prompt_groups = 4;
      break;
  }
}

}  // namespace

std::string_view sharing_name(Sharing s) {
  switch (s) {
    case Sharing::kUnshared:
      return "unshared";
    case Sharing::kNoSystemPrompt:
      return "no-system-prompt";
    case Sharing::kPreset:
      return "preset";
    case Sharing::kLight:
      return "light";
    case Sharing::kHeavy:
      return "heavy";
  }
  return "?";
}

std::string_view ladder_name(LadderShape l) {
  switch (l) {
    case LadderShape::kMonotone:
      return "monotone";
    case LadderShape::kUpDown:
      return "up-down";
    case LadderShape::kBursty:
      return "bursty";
    case LadderShape::kPlateau:
      return "plateau";
  }
  return "?";
}

std::string SuiteParams::name() const {
  char buf[16];
  std::snprintf(buf, sizeof buf, "s%03d", index);
  return buf;
}

std::string SuiteParams::describe() const {
  std::string out = std::to_string(pods) + " pods";
  if (mid + slow > 0) {
    out += " (" + std::to_string(mid) + " mid, " + std::to_string(slow) + " slow)";
  }
  out += ", " + preset;
  if (!mix_preset.empty()) {
    out += "+" + mix_preset + " " + std::to_string(static_cast<int>(std::lround(100 * mix_share))) +
           " %";
  }
  out += ", sharing " + std::string(sharing_name(sharing)) + ", " +
         std::string(ladder_name(ladder)) + " ";
  char buf[32];
  for (std::size_t i = 0; i < load.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.2f", i ? "/" : "", load[i]);
    out += buf;
  }
  out += "x";
  if (slo_share > 0) {
    std::snprintf(buf, sizeof buf, ", SLO on %d %% (ttft %.1fx", static_cast<int>(100 * slo_share),
                  slo_ttft_x);
    out += buf;
    if (slo_tpot_x > 0) {
      std::snprintf(buf, sizeof buf, ", tpot %.1fx", slo_tpot_x);
      out += buf;
    }
    out += ")";
  }
  std::snprintf(buf, sizeof buf, ", length %.2f", length_scale);
  out += buf;
  return out;
}

SuiteOptions SuiteOptions::quick() {
  SuiteOptions o;
  o.max_pods = 24;
  o.max_length_scale = 0.3;
  o.stage_seconds = 3;
  o.probe_stage_seconds = 1.5;
  o.max_requests = 8000;
  o.max_work = 0;
  o.max_pod_seconds = 0;
  o.min_retrains_per_stage = 0;
  o.oracle_max_pods = 0;
  return o;
}

SuiteParams SuiteGenerator::draw(uint64_t suite_seed, int index) const {
  const SuiteOptions& o = options_;
  Draw d(splitmix(suite_seed * 0x100000001b3ull + static_cast<uint64_t>(index)));
  SuiteParams p;
  p.index = index;
  p.seed = suite_seed * 1000 + static_cast<uint64_t>(index) + 1;
  p.pods = std::clamp(static_cast<int>(std::floor(d.log_uniform(o.min_pods, o.max_pods + 1.0))),
                      o.min_pods, o.max_pods);
  if (d.unit() >= 0.35) {  // 35 % of pools are homogeneous
    const int others = static_cast<int>(std::floor(d.unit() * o.max_slow_share * p.pods + 0.5));
    p.mid = static_cast<int>(std::floor(d.unit() * (others + 1)));
    p.mid = std::min(p.mid, others);
    p.slow = others - p.mid;
  }
  const auto& presets = suite_presets();
  p.preset = presets[static_cast<std::size_t>(d.below(static_cast<int>(presets.size())))];
  if (d.unit() < 0.3) {
    int k = d.below(static_cast<int>(presets.size()) - 1);
    if (presets[static_cast<std::size_t>(k)] == p.preset) {
      k = static_cast<int>(presets.size()) - 1;
    }
    p.mix_preset = presets[static_cast<std::size_t>(k)];
    p.mix_share = std::round(d.uniform(0.2, 0.5) * 100) / 100;
  }
  p.sharing = static_cast<Sharing>(d.below(5));
  p.ladder = static_cast<LadderShape>(d.below(4));
  const int n = std::max(2, o.stages);
  auto r2 = [](double v) { return std::round(v * 100) / 100; };
  switch (p.ladder) {
    case LadderShape::kMonotone: {
      const double lo = d.uniform(0.15, 0.3), hi = d.uniform(1.05, 1.3);
      for (int i = 0; i < n; ++i) {
        p.load.push_back(r2(lo + (hi - lo) * i / (n - 1)));
      }
      break;
    }
    case LadderShape::kUpDown: {
      const double lo = d.uniform(0.2, 0.4), peak = d.uniform(1.0, 1.3), end = d.uniform(0.3, 0.6);
      const int top = std::clamp(n / 2 - 1 + d.below(2), 1, n - 2);
      for (int i = 0; i < n; ++i) {
        p.load.push_back(r2(i <= top ? lo + (peak - lo) * i / top
                                     : peak + (end - peak) * (i - top) / (n - 1 - top)));
      }
      break;
    }
    case LadderShape::kBursty: {
      const double low = d.uniform(0.2, 0.5), high = d.uniform(1.0, 1.4);
      for (int i = 0; i < n; ++i) {
        p.load.push_back(r2(i % 2 == 0 ? low : high));
      }
      break;
    }
    case LadderShape::kPlateau: {
      const double level = d.uniform(1.1, 1.4);
      p.load.push_back(r2(level / 2));
      for (int i = 1; i < n; ++i) {
        p.load.push_back(r2(level));
      }
      break;
    }
  }
  p.slo_share = 0.5 * d.below(3);
  if (p.slo_share > 0) {
    p.slo_ttft_x = std::round(d.uniform(1.5, 4.0) * 10) / 10;
    if (d.unit() < 0.5) {
      p.slo_tpot_x = std::round(d.uniform(1.2, 2.0) * 10) / 10;
    }
  }
  p.length_scale = std::round(d.log_uniform(o.min_length_scale, o.max_length_scale) * 100) / 100;
  p.length_scale = std::clamp(p.length_scale, o.min_length_scale, o.max_length_scale);
  p.oracle = p.pods <= o.oracle_max_pods && p.length_scale <= o.oracle_max_length_scale;
  return p;
}

std::vector<SuiteParams> SuiteGenerator::generate(uint64_t suite_seed, int n) const {
  std::vector<SuiteParams> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(draw(suite_seed, i));
  }
  return out;
}

Scenario probe_scenario(const SuiteParams& p, const SuiteOptions& o) {
  Scenario s;
  apply_shape(p, s);
  s.name = p.name() + "-probe";
  s.title = "saturation probe: " + p.describe();
  // Capacity guess: per-pod rate of each workload (harmonic mean over a mixture), longer
  // requests proportionally slower, slower pods weighted by their speed; conversations that
  // never grow (no shared history) are cheaper.
  auto guess = [&](const std::string& preset) {
    double g = per_pod_guess(preset) * std::pow(0.1 / p.length_scale, 0.9);
    if (p.sharing == Sharing::kUnshared && preset != "sharegpt") {
      g *= 3;
    }
    return g;
  };
  double per_pod = guess(p.preset);
  if (!p.mix_preset.empty()) {
    per_pod = 1.0 / ((1 - p.mix_share) / per_pod + p.mix_share / guess(p.mix_preset));
  }
  const double pods = (p.pods - p.mid - p.slow) + 0.7 * p.mid + 0.45 * p.slow;
  const double capacity = per_pod * pods;
  // The first seven stages offer ~10.9x the guess per stage-second; the probe rarely runs more.
  const double seconds = capped_stage_seconds(p, o, o.probe_stage_seconds * stage_scale(p),
                                              10.9 * capacity, 7, 1.0 / 3);
  for (int k = 0; k < 12; ++k) {
    s.stages.push_back({round_sig(capacity * 0.25 * std::pow(1.6, k), 3), seconds});
  }
  s.own_stage_length = true;
  s.strategies = {Strategy::kRoundRobin};
  return s;
}

double capped_stage_seconds(const SuiteParams& p, const SuiteOptions& o, double wanted,
                            double offered, int stages, double share) {
  double seconds = wanted;
  if (offered > 0) {
    seconds = std::min(seconds, share * o.max_requests / offered);
    if (o.max_work > 0) {
      seconds = std::min(seconds, share * o.max_work / (offered * stage_scale(p)));
    }
  }
  if (o.max_pod_seconds > 0 && stages > 0) {
    seconds = std::min(seconds, share * o.max_pod_seconds / (p.pods * stages));
  }
  // 10 s of real time between retrains, times the scenario's time scale (its length scale).
  const double floor = std::min(wanted, o.min_retrains_per_stage * 10.0 * p.length_scale);
  return std::max({0.5, floor, seconds});
}

bool probe_stage_saturated(const std::vector<Summary>& sums, std::size_t i) {
  return sums.at(i).ttft.p50 > 2 * std::max(1e-3, sums.at(0).ttft.p50) ||
         sums.at(i).ttft.p95 > 4 * std::max(1e-3, sums.at(0).ttft.p95) ||
         sums.at(i).success_rate < 0.999;
}

ProbeResult probe_saturation(const SuiteParams& p, const SuiteOptions& o,
                             const std::function<std::vector<Summary>(const Scenario&)>& run) {
  const Scenario full = probe_scenario(p, o);
  for (std::size_t k = 2;; ++k) {
    Scenario part = full;
    part.stages.resize(k);
    const auto sums = run(part);
    if (k == full.stages.size() || probe_stage_saturated(sums, k - 1)) {
      return read_probe(part, sums);
    }
  }
}

ProbeResult read_probe(const Scenario& probe, const std::vector<Summary>& sums) {
  ProbeResult out;
  const std::size_t n = std::min(probe.stages.size(), sums.size());
  if (n == 0) {
    throw std::invalid_argument("probe without stages");
  }
  out.base_ttft_p90_ms = sums[0].ttft.p90;
  out.base_tpot_p90_ms = sums[0].tpot.p90;
  std::size_t first_over = n;
  for (std::size_t i = 1; i < n; ++i) {
    if (probe_stage_saturated(sums, i)) {
      first_over = i;
      break;
    }
  }
  if (first_over == n) {
    out.saturated = false;
    out.saturation_rps = probe.stages[n - 1].rate * 1.3;
  } else {
    out.saturation_rps =
        std::sqrt(probe.stages[first_over - 1].rate * probe.stages[first_over].rate);
  }
  out.saturation_rps = round_sig(out.saturation_rps, 3);
  return out;
}

Scenario suite_scenario(const SuiteParams& p, const ProbeResult& probe, const SuiteOptions& o) {
  Scenario s;
  apply_shape(p, s);
  s.name = p.name();
  s.title = p.describe();
  s.saturation_rps = probe.saturation_rps;
  double offered = 0;  // requests per stage-second over the ladder
  for (double f : p.load) {
    offered += f * probe.saturation_rps;
  }
  const double seconds = capped_stage_seconds(p, o, o.stage_seconds * stage_scale(p), offered,
                                              static_cast<int>(p.load.size()), 1.0);
  for (double f : p.load) {
    s.stages.push_back({round_sig(f * probe.saturation_rps, 3), seconds});
  }
  s.own_stage_length = true;
  if (o.retrains_per_stage > 0) {
    s.max_retrain_ms = 1000.0 * seconds / o.retrains_per_stage;
  }
  s.ladder = p.ladder == LadderShape::kMonotone;
  if (p.slo_share > 0) {
    s.slo_share = p.slo_share;
    s.slo_ttft_ms = std::max(1.0, std::round(p.slo_ttft_x * probe.base_ttft_p90_ms));
    if (p.slo_tpot_x > 0) {
      s.slo_tpot_ms = std::max(1.0, std::round(p.slo_tpot_x * probe.base_tpot_p90_ms * 10) / 10);
    }
  }
  s.strategies = {Strategy::kRoundRobin, Strategy::kLoadPrefix111, Strategy::kLoadPrefix322,
                  Strategy::kPredictedLeast, Strategy::kPredictedUpstream};
  if (p.oracle) {
    s.strategies.push_back(Strategy::kOracle);
    s.strategies.push_back(Strategy::kOracleCost);
    s.strategies.push_back(Strategy::kOracleSlo);  // runs only when --strategies names it
  }
  s.note = probe.saturated ? "" : "no probe stage saturated: saturation extrapolated";
  return s;
}

double suite_ttft_p95(const ScenarioRuns& sr, Strategy s) {
  const int k = find_run(sr, s);
  return k < 0 || sr.summaries[static_cast<std::size_t>(k)].empty()
             ? kNaN
             : run_figures(sr.scenario, sr.summaries[static_cast<std::size_t>(k)]).ttft_p95;
}

SuiteVerdict suite_verdict(const ScenarioRuns& sr, Strategy s) {
  SuiteVerdict v;
  const SeedVerdict sv = seed_verdict(sr, s);
  if (!sv.present) {
    return v;
  }
  v.present = true;
  v.ttft_rel = sv.ttft_rel;
  v.best = sv.best_ttft;
  v.has_slo = sr.scenario.slo_ttft_ms || sr.scenario.slo_tpot_ms;
  v.slo_pts = v.has_slo ? sv.slo_pts : 0;
  v.as_good =
      v.ttft_rel <= kSuiteTtftTolerance && (!v.has_slo || v.slo_pts >= -kSuiteSloTolerancePts);
  const int mine = find_run(sr, s);
  if (const int bo = best_heuristic_overload(sr); bo >= 0 && mine >= 0) {
    const RunFigures a = run_figures(sr.scenario, sr.summaries[static_cast<std::size_t>(mine)]);
    const RunFigures b = run_figures(sr.scenario, sr.summaries[static_cast<std::size_t>(bo)]);
    v.overload_loss = v.has_slo ? 1.0 - a.over_goodput_rps / b.over_goodput_rps
                                : a.over_ttft_p95 / b.over_ttft_p95 - 1.0;
  }
  auto p95 = [&](Strategy st) { return suite_ttft_p95(sr, st); };
  // The bound is the better of the two oracles: the greedy one gives up cache locality that
  // later requests need, the cost-aware one can over-value it (suite.h).
  const double b = p95(sv.best_ttft), m = p95(s);
  const double o = std::fmin(p95(Strategy::kOracle), p95(Strategy::kOracleCost));
  v.oracle_rel = o / b - 1;
  if (o < b && std::isfinite(m)) {
    v.gap_recovered = (b - m) / (b - o);
  }
  return v;
}

double quantile(std::vector<double> v, double p) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) {
    return kNaN;
  }
  std::sort(v.begin(), v.end());
  const double at = std::clamp(p, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(at));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

}  // namespace llmd::cluster
