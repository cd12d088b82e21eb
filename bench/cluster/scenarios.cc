#include "bench/cluster/scenarios.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace llmd::cluster {

namespace {

std::vector<workload::Stage> ladder(std::initializer_list<double> rates, double duration_s) {
  std::vector<workload::Stage> out;
  for (double r : rates) {
    out.push_back({r, duration_s});
  }
  return out;
}

Scenario base(std::string name, std::string preset, std::string title) {
  Scenario s;
  s.name = std::move(name);
  s.preset = std::move(preset);
  s.title = std::move(title);
  s.pool.num_pods = 10;
  return s;
}

// Applies the set options: stage length, then the quick shrink (the same load per pod on pools
// of at most 2-3 pods, three 5-s stages).
void finish(std::vector<Scenario>& out, const SetOptions& o) {
  const double stage_s = o.stage_seconds > 0 ? o.stage_seconds
                         : o.quick           ? 5.0
                                             : kDefaultStageSeconds;
  for (auto& s : out) {
    if (!s.own_stage_length || o.quick) {
      for (auto& st : s.stages) {
        st.duration_s = stage_s;
      }
    }
  }
  if (!o.quick) {
    return;
  }
  for (auto& s : out) {
    const int pods = std::max(2, std::min(s.pool.num_pods, 10) / 5);
    const double factor = static_cast<double>(pods) / static_cast<double>(s.pool.num_pods);
    s.pool.num_pods = pods;
    s.pool.num_slow = s.pool.num_slow > 0 ? 1 : 0;
    for (auto& st : s.stages) {
      st.rate *= factor;
    }
    s.saturation_rps *= factor;
    if (s.stages.size() > 3) {
      s.stages.resize(3);
    }
  }
}

}  // namespace

std::vector<Scenario> default_scenarios(const SetOptions& options) {
  // Ladders: eight stages from ~1/7 to ~1.15x the rate at which round-robin saturates this
  // pool. Conversations grow over a run, so where a ladder saturates depends on how long it
  // has run: `saturation_rps` is where round-robin's TTFT left the tens of milliseconds on
  // this ladder with the default stage length (seeds 1-3; TTFT p95 of 0.5-1.5 s in the first
  // stage above it). Other stage lengths move the knee: longer stages lower it.
  std::vector<Scenario> out;
  const double d = kDefaultStageSeconds;  // replaced by finish()
  {
    Scenario s = base("A", "A", "preset A: 6x1000 users, short questions, multi-turn");
    s.stages = ladder({100, 200, 300, 400, 500, 600, 700, 800}, d);
    s.saturation_rps = 680;
    out.push_back(s);
  }
  {
    Scenario s = base("B", "B", "preset B: 6x1000 users, long questions, multi-turn");
    s.stages = ladder({40, 80, 120, 160, 200, 240, 280, 320}, d);
    s.saturation_rps = 280;
    out.push_back(s);
  }
  {
    Scenario s = base("C", "C", "preset C: 150x5 users, long system prompts, multi-turn");
    s.stages = ladder({20, 40, 60, 80, 100, 120, 140, 160}, d);
    s.saturation_rps = 140;
    out.push_back(s);
  }
  {
    Scenario s = base("D", "D", "preset D: 150x5 users, very long questions, multi-turn");
    s.stages = ladder({12, 24, 36, 48, 60, 72, 84, 96}, d);
    s.saturation_rps = 82;
    out.push_back(s);
  }
  {
    Scenario s = base("sharegpt", "sharegpt",
                      "sharegpt: no shared prefix, heavy-tailed single-turn lengths (unscaled)");
    s.length_scale = 1.0;  // already short (mean 165 in / 300 out): kept at full length
    s.stages = ladder({80, 160, 240, 320, 400, 480, 560, 640}, d);
    s.saturation_rps = 560;
    out.push_back(s);
  }
  {
    Scenario s = base("production", "production",
                      "production: 8 stages alternating low/high load (1:5 as in the public "
                      "benchmark's 1 and 5 req/s), heavy-tailed lengths, high prefix reuse");
    s.stages = ladder({70, 350, 70, 350, 70, 350, 70, 350}, d);
    s.saturation_rps = 350;  // the high stages sit at round-robin's knee
    s.ladder = false;
    out.push_back(s);
  }
  {
    Scenario s = base("slo", "C",
                      "preset C with SLO headers on every request (x-slo-ttft-ms 150, "
                      "x-slo-tpot-ms 15)");
    s.stages = ladder({50, 100, 150, 200}, d);
    s.slo_ttft_ms = 150;
    s.slo_tpot_ms = 15;
    s.saturation_rps = 180;  // four stages: conversations are shorter than in C's ladder
    out.push_back(s);
  }
  {
    Scenario s = base("hetero", "B",
                      "heterogeneous pool: 6 h100 + 4 slow (A100-like) pods, preset B ladder");
    s.pool.num_slow = 4;
    s.stages = ladder({30, 60, 90, 120, 150, 180, 210, 240}, d);
    s.saturation_rps = 170;  // round-robin saturates the slow pods first
    out.push_back(s);
  }
  {
    Scenario s = base("scale100", "sharegpt",
                      "speed check: 100 h100 pods, sharegpt at thousands of requests/s");
    s.length_scale = 1.0;
    s.pool.num_pods = 100;
    s.stages = ladder({1000, 2000, 3000, 4000}, 10);
    s.own_stage_length = true;
    s.saturation_rps = 5600;  // ten times sharegpt's pool: every stage is below saturation
    s.strategies = {Strategy::kRoundRobin, Strategy::kLoadPrefix111, Strategy::kPredictedLeast};
    s.note =
        "only round-robin, load+prefix (1,1,1) (= (3,2,2) without shared prefixes) and "
        "predicted-latency; the oracle would copy 100 engines per request";
    out.push_back(s);
  }
  {
    // The public llm-d predicted-latency blog's regime: a few large pods at full sequence
    // length (TTFT in seconds at load), load alternating 1:5. Full length means full time
    // scale: a 50-ms scrape and a 10-s retrain, as on a real stack.
    Scenario s = base("blog", "production",
                      "blog regime: 4 h100 pods, production at full length (long heavy-tailed "
                      "prompts, shared system prompts, multi-turn), load alternating 1:5");
    s.length_scale = 1.0;
    s.pool.num_pods = 4;
    // 60-s stages: six retrains each at the real 10-s cadence. Conversations keep growing
    // over the run (contexts reach tens of thousands of tokens), so the same rate loads the
    // pool more in later stages; at 5:25 round-robin's TTFT p95 in the high stages goes from
    // ~0.4 s to seconds, and in the last one the pool saturates.
    s.stages = ladder({5, 25, 5, 25, 5, 25, 5, 25}, 60);
    s.own_stage_length = true;
    s.saturation_rps = 25;  // the high stages sit at round-robin's knee
    s.ladder = false;
    out.push_back(s);
  }
  finish(out, options);
  return out;
}

std::vector<Scenario> holdout_scenarios(const SetOptions& options) {
  // Shapes that no pipeline was tuned on. Rates are multiples of the saturation rate found by
  // running round-robin on a ladder of each shape with 10-s stages, seeds 1-3 (the only thing
  // measured before they were added).
  std::vector<Scenario> out;
  auto rates = [](double sat, std::initializer_list<double> fractions) {
    std::vector<workload::Stage> st;
    for (double f : fractions) {
      st.push_back({std::round(sat * f * 10.0) / 10.0, kDefaultStageSeconds});
    }
    return st;
  };
  const auto up = {0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 1.0, 1.15};
  {
    Scenario s = base("h12slo", "C",
                      "hold-out: 8 h100 + 4 slow pods, preset C with SLO headers "
                      "(x-slo-ttft-ms 150, x-slo-tpot-ms 20)");
    s.pool.num_pods = 12;
    s.pool.num_slow = 4;
    s.slo_ttft_ms = 150;
    s.slo_tpot_ms = 20;
    s.saturation_rps = 88;
    s.stages = rates(s.saturation_rps, up);
    out.push_back(s);
  }
  {
    Scenario s = base("h16D", "D", "hold-out: 16 h100 pods, preset D ladder");
    s.pool.num_pods = 16;
    s.saturation_rps = 115;
    s.stages = rates(s.saturation_rps, up);
    out.push_back(s);
  }
  {
    Scenario s = base("h6A", "A",
                      "hold-out: 6 h100 pods, preset A, load up and down (0.3-1.1x saturation, "
                      "not monotone)");
    s.pool.num_pods = 6;
    s.saturation_rps = 470;
    s.stages = rates(s.saturation_rps, {0.3, 0.6, 0.85, 1.1, 0.7, 0.45, 0.95, 0.2});
    s.ladder = false;
    out.push_back(s);
  }
  {
    Scenario s = base("h8prod", "production",
                      "hold-out: 8 h100 pods, production lengths without shared prefixes "
                      "(single turn, no system prompt), load alternating 1:3");
    s.pool.num_pods = 8;
    s.unshared = true;
    s.saturation_rps = 3400;  // tiny median requests: thousands per second
    s.stages = rates(s.saturation_rps, {0.33, 1.0, 0.33, 1.0, 0.33, 1.0, 0.33, 1.0});
    s.ladder = false;
    out.push_back(s);
  }
  {
    Scenario s = base("h20share", "sharegpt",
                      "hold-out: 15 h100 + 5 slow pods, sharegpt with x-slo-ttft-ms 100 only");
    s.length_scale = 1.0;
    s.pool.num_pods = 20;
    s.pool.num_slow = 5;
    s.slo_ttft_ms = 100;
    s.saturation_rps = 680;
    s.stages = rates(s.saturation_rps, up);
    out.push_back(s);
  }
  finish(out, options);
  return out;
}

std::vector<int> below_saturation_stages(const Scenario& s) {
  std::vector<int> out;
  if (!(s.saturation_rps > 0)) {
    return out;
  }
  for (std::size_t i = 0; i < s.stages.size(); ++i) {
    // A small tolerance: 0.9x of a rounded saturation rate must not flip a stage.
    if (s.stages[i].rate <= 0.9 * s.saturation_rps * (1 + 1e-9)) {
      out.push_back(static_cast<int>(i));
    }
  }
  return out;
}

std::vector<int> overload_stages(const Scenario& s) {
  std::vector<int> out;
  if (!(s.saturation_rps > 0)) {
    return out;
  }
  const auto below = below_saturation_stages(s);
  for (std::size_t i = 0; i < s.stages.size(); ++i) {
    if (std::find(below.begin(), below.end(), static_cast<int>(i)) == below.end()) {
      out.push_back(static_cast<int>(i));
    }
  }
  return out;
}

namespace {

// A preset with the scenario's sharing settings and its context limit scaled.
workload::WorkloadSpec scenario_spec(const Scenario& s, const std::string& name) {
  auto spec = workload::preset(name);
  if (!spec) {
    throw std::invalid_argument("unknown preset " + name);
  }
  if (s.unshared) {
    spec->shared_prefix = false;
    spec->multi_turn = false;
    spec->system_prompt_len = 0;
  }
  if (s.system_prompt_tokens) {
    spec->system_prompt_len = std::max<int64_t>(0, *s.system_prompt_tokens);
    if (spec->system_prompt_len > 0) {
      spec->shared_prefix = true;
    }
  }
  if (s.prompt_groups > 0 && spec->shared_prefix) {
    const int64_t users = std::max(spec->num_groups * spec->prompts_per_group, s.prompt_groups);
    spec->num_groups = s.prompt_groups;
    spec->prompts_per_group = std::max<int64_t>(1, users / s.prompt_groups);
  }
  // Conversations restart at the scaled context limit, so a scaled KV cache can hold them.
  spec->max_context_tokens = std::max<int64_t>(
      spec->system_prompt_len + 64,
      std::llround(static_cast<double>(spec->max_context_tokens) * s.length_scale));
  return *spec;
}

}  // namespace

workload::Trace make_trace(const Scenario& s) {
  workload::GenerateOptions o;
  o.seed = s.seed;
  o.stages = s.stages;
  o.length_scale = s.length_scale;
  o.slo_ttft_ms = s.slo_ttft_ms;
  o.slo_tpot_ms = s.slo_tpot_ms;
  o.slo_share = s.slo_share;
  if (!s.mix_preset.empty() && s.mix_share > 0) {
    o.mix = scenario_spec(s, s.mix_preset);
    o.mix_share = s.mix_share;
  }
  return workload::generate(scenario_spec(s, s.preset), o);
}

double scrape_interval_ms(const Scenario& s, const TimeBase& t) {
  return t.scrape_real_ms * s.effective_time_scale();
}

double retrain_interval_ms(const Scenario& s, const TimeBase& t) {
  const double scaled = t.retrain_real_s * 1000.0 * s.effective_time_scale();
  return s.max_retrain_ms > 0 ? std::min(scaled, s.max_retrain_ms) : scaled;
}

RunConfig make_run_config(const Scenario& s, Strategy strategy, const std::string& dir,
                          const TimeBase& time) {
  RunConfig c;
  c.pool = s.pool;
  c.pool.kv_scale = s.length_scale;
  c.pool.seed = s.seed;
  c.strategy = strategy;
  c.seed = s.seed;
  c.epp_config_dir = dir;
  c.scrape_interval_ms = scrape_interval_ms(s, time);
  c.retrain_interval_ms = retrain_interval_ms(s, time);
  return c;
}

}  // namespace llmd::cluster
