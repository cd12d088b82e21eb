#include "bench/cluster/scenarios.h"

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

}  // namespace

std::vector<Scenario> default_scenarios(bool quick) {
  // Ladders: eight 15-s stages from ~1/7 to ~1.15x the rate at which round-robin saturates
  // this pool (found by running the ladder: TTFT p50 leaves the tens of milliseconds).
  std::vector<Scenario> out;
  const double d = 15;  // seconds per stage
  {
    Scenario s = base("A", "A", "preset A: 6x1000 users, short questions, multi-turn");
    s.stages = ladder({100, 200, 300, 400, 500, 600, 700, 800}, d);
    out.push_back(s);
  }
  {
    Scenario s = base("B", "B", "preset B: 6x1000 users, long questions, multi-turn");
    s.stages = ladder({35, 70, 105, 140, 175, 210, 245, 280}, d);
    out.push_back(s);
  }
  {
    Scenario s = base("C", "C", "preset C: 150x5 users, long system prompts, multi-turn");
    s.stages = ladder({20, 40, 60, 80, 100, 120, 140, 160}, d);
    out.push_back(s);
  }
  {
    Scenario s = base("D", "D", "preset D: 150x5 users, very long questions, multi-turn");
    s.stages = ladder({12, 24, 36, 48, 60, 72, 84, 96}, d);
    out.push_back(s);
  }
  {
    Scenario s = base("sharegpt", "sharegpt",
                      "sharegpt: no shared prefix, heavy-tailed single-turn lengths (unscaled)");
    s.length_scale = 1.0;  // already short (mean 165 in / 300 out): kept at full length
    s.stages = ladder({80, 160, 240, 320, 400, 480, 560, 640}, d);
    out.push_back(s);
  }
  {
    Scenario s = base("production", "production",
                      "production: 8 stages alternating low/high load (1:5 as in the public "
                      "benchmark's 1 and 5 req/s), heavy-tailed lengths, high prefix reuse");
    s.stages = ladder({55, 275, 55, 275, 55, 275, 55, 275}, d);
    s.ladder = false;
    out.push_back(s);
  }
  {
    Scenario s = base("slo", "C",
                      "preset C with SLO headers on every request (x-slo-ttft-ms 150, "
                      "x-slo-tpot-ms 15)");
    s.stages = ladder({40, 80, 120, 160}, d);
    s.slo_ttft_ms = 150;
    s.slo_tpot_ms = 15;
    out.push_back(s);
  }
  {
    Scenario s = base("hetero", "B",
                      "heterogeneous pool: 6 h100 + 4 slow (A100-like) pods, preset B ladder");
    s.pool.num_slow = 4;
    s.stages = ladder({30, 60, 90, 120, 150, 180, 210, 240}, d);
    out.push_back(s);
  }
  {
    Scenario s = base("scale100", "sharegpt",
                      "speed check: 100 h100 pods, sharegpt at thousands of requests/s");
    s.length_scale = 1.0;
    s.pool.num_pods = 100;
    s.stages = ladder({1000, 2000, 3000, 4000}, 10);
    s.strategies = {Strategy::kRoundRobin, Strategy::kLoadPrefix111, Strategy::kPredictedLeast};
    s.note = "only round-robin, load+prefix (1,1,1) (= (3,2,2) without shared prefixes) and "
             "predicted-latency; the oracle would copy 100 engines per request";
    out.push_back(s);
  }
  if (quick) {
    for (auto& s : out) {
      const int pods = std::max(2, std::min(s.pool.num_pods, 10) / 5);
      const double factor = static_cast<double>(pods) / static_cast<double>(s.pool.num_pods);
      s.pool.num_pods = pods;
      s.pool.num_slow = s.pool.num_slow > 0 ? 1 : 0;
      for (auto& st : s.stages) {
        st.rate *= factor;  // the same load per pod
        st.duration_s = 5;
      }
      if (s.stages.size() > 3) {
        s.stages.resize(3);
      }
    }
  }
  return out;
}

workload::Trace make_trace(const Scenario& s) {
  auto spec = workload::preset(s.preset);
  if (!spec) {
    throw std::invalid_argument("unknown preset " + s.preset);
  }
  // Conversations restart at the scaled context limit, so a scaled KV cache can hold them.
  spec->max_context_tokens = std::max<int64_t>(
      spec->system_prompt_len + 64,
      std::llround(static_cast<double>(spec->max_context_tokens) * s.length_scale));
  workload::GenerateOptions o;
  o.seed = s.seed;
  o.stages = s.stages;
  o.length_scale = s.length_scale;
  o.slo_ttft_ms = s.slo_ttft_ms;
  o.slo_tpot_ms = s.slo_tpot_ms;
  return workload::generate(*spec, o);
}

RunConfig make_run_config(const Scenario& s, Strategy strategy, const std::string& dir) {
  RunConfig c;
  c.pool = s.pool;
  c.pool.kv_scale = s.length_scale;
  c.pool.seed = s.seed;
  c.strategy = strategy;
  c.seed = s.seed;
  c.epp_config_dir = dir;
  return c;
}

}  // namespace llmd::cluster
