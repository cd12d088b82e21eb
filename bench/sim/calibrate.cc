// sim_calibrate: simulated TTFT/TPOT of one pod versus load, in virtual time, as Markdown.
// Produces the table of bench/sim/CALIBRATION.md. Prompts are unique (no prefix reuse); output
// lengths are the given length +/- 20% (uniform).
//   sim_calibrate [--profile h100|slow] [--input-len 1000] [--output-len 128] [--seed 1]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/sim/sim_engine.h"
#include "bench/workload/workload.h"

using namespace llmd::sim;

namespace {

struct Options {
  std::string profile = "h100";
  int64_t input_len = 1000;
  int64_t output_len = 128;
  uint64_t seed = 1;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        throw std::invalid_argument(a + " needs a value");
      }
      return argv[++i];
    };
    if (a == "--profile") {
      o.profile = next();
    } else if (a == "--input-len") {
      o.input_len = std::stoll(next());
    } else if (a == "--output-len") {
      o.output_len = std::stoll(next());
    } else if (a == "--seed") {
      o.seed = std::stoull(next());
    } else {
      throw std::invalid_argument("unknown argument " + a);
    }
  }
  return o;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

struct Result {
  std::vector<double> ttft;
  std::vector<double> tpot;
  double output_tokens = 0;
  double duration_ms = 0;
  double kv_sum = 0;
  int64_t kv_samples = 0;
  int64_t preemptions = 0;
  int64_t generated = 0;  // all output tokens, warm-up included
};

class Load {
 public:
  Load(const Options& o, GpuProfile profile) : o_(o) {
    EngineConfig cfg;
    cfg.profile = profile;
    cfg.seed = o.seed;
    engine_ = std::make_unique<SimEngine>(cfg);
    root_ = root_hash(cfg.model_name);
  }

  // Output lengths vary uniformly by +/-20% so closed-loop users do not stay in lock-step.
  void submit() {
    std::vector<TokenId> prompt(static_cast<std::size_t>(o_.input_len));
    for (auto& t : prompt) {
      t = hash_combine(next_id_, rng_());
    }
    const auto lo = static_cast<int64_t>(0.8 * static_cast<double>(o_.output_len));
    const auto hi = static_cast<int64_t>(1.2 * static_cast<double>(o_.output_len));
    const int64_t out = std::uniform_int_distribution<int64_t>(std::max<int64_t>(1, lo), hi)(rng_);
    engine_->submit(make_request(next_id_++, prompt, root_, out));
  }

  // Closed loop: `users` clients, each resubmits as soon as its request finishes.
  Result closed(int users, int64_t requests) {
    for (int i = 0; i < users; ++i) {
      submit();
    }
    // The first 2 x users completions include the synchronized start: not steady state.
    return run(
        requests, [&](double) { submit(); }, 2.0 * users);
  }

  // All at t = 0 (vLLM's offline throughput test): (input, output) lengths per request.
  // Returns the request throughput in req/s.
  double burst(const std::vector<std::pair<int64_t, int64_t>>& lengths) {
    for (const auto& [in, out] : lengths) {
      std::vector<TokenId> prompt(static_cast<std::size_t>(in));
      for (auto& t : prompt) {
        t = hash_combine(next_id_, rng_());
      }
      engine_->submit(make_request(next_id_++, prompt, root_, out));
    }
    std::vector<SimEvent> events;
    while (engine_->next_event_time() != kNever) {
      events.clear();
      engine_->advance_to(engine_->next_event_time(), events);
    }
    return static_cast<double>(lengths.size()) / (engine_->now() / 1000.0);
  }

  // Open loop: Poisson arrivals at `qps` for `requests` requests.
  Result open(double qps, int64_t requests) {
    std::exponential_distribution<double> gap(qps / 1000.0);
    double next_arrival = 0;
    int64_t sent = 0;
    Result r;
    std::vector<SimEvent> events;
    const double warmup = 0.1 * static_cast<double>(requests);
    int64_t finished = 0;
    while (finished < requests) {
      const double t = sent < requests ? std::min(next_arrival, engine_->next_event_time())
                                       : engine_->next_event_time();
      events.clear();
      engine_->advance_to(t, events);
      if (sent < requests && t >= next_arrival) {
        submit();
        ++sent;
        next_arrival += gap(rng_);
      }
      for (const auto& ev : events) {
        if (ev.type == EventType::kFinished) {
          ++finished;
          record(r, ev, finished > warmup);
        }
      }
      sample_kv(r);
    }
    r.duration_ms = engine_->now();
    return r;
  }

 private:
  template <typename OnFinish>
  Result run(int64_t requests, OnFinish on_finish, double warmup) {
    Result r;
    std::vector<SimEvent> events;
    int64_t finished = 0;
    while (finished < requests && engine_->next_event_time() != kNever) {
      events.clear();
      engine_->advance_to(engine_->next_event_time(), events);
      for (const auto& ev : events) {
        if (ev.type == EventType::kFinished) {
          ++finished;
          record(r, ev, finished > warmup);
          on_finish(ev.time_ms);
        }
      }
      sample_kv(r);
    }
    r.duration_ms = engine_->now();
    return r;
  }

  void record(Result& r, const SimEvent& ev, bool keep) {
    if (!keep) {
      return;
    }
    r.ttft.push_back(ev.stats.ttft_ms());
    r.tpot.push_back(ev.stats.tpot_ms());
    r.output_tokens += static_cast<double>(ev.stats.output_tokens);
  }

  void sample_kv(Result& r) {
    const auto m = engine_->metrics();
    r.kv_sum += m.kv_usage;
    ++r.kv_samples;
    r.preemptions = m.num_preemptions;
    r.generated = m.generation_tokens;
  }

  const Options& o_;
  std::unique_ptr<SimEngine> engine_;
  BlockHash root_ = 0;
  uint64_t next_id_ = 1;
  std::mt19937_64 rng_{12345};
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const auto profile = profile_by_name(o.profile);
    if (!profile) {
      throw std::invalid_argument("unknown profile " + o.profile);
    }
    std::printf(
        "Profile `%s`, input %lld tokens (unique), output %lld +/- 20%% tokens, seed %llu.\n\n",
        o.profile.c_str(), static_cast<long long>(o.input_len),
        static_cast<long long>(o.output_len), static_cast<unsigned long long>(o.seed));
    std::printf(
        "Closed loop (N concurrent users, each sends its next request when the previous "
        "finishes):\n\n");
    std::printf(
        "| concurrency | TTFT p50 (ms) | TTFT p99 (ms) | TPOT p50 (ms) | TPOT p99 (ms) | "
        "output tok/s | mean KV usage | preemptions |\n|---|---|---|---|---|---|---|---|\n");
    for (int users : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
      Load load(o, *profile);
      const int64_t requests = std::max<int64_t>(300, 10LL * users);
      auto r = load.closed(users, requests);
      std::printf(
          "| %d | %.1f | %.1f | %.2f | %.2f | %.0f | %.2f | %lld |\n", users,
          percentile(r.ttft, 0.5), percentile(r.ttft, 0.99), percentile(r.tpot, 0.5),
          percentile(r.tpot, 0.99), static_cast<double>(r.generated) / (r.duration_ms / 1000.0),
          r.kv_sum / std::max<int64_t>(1, r.kv_samples), static_cast<long long>(r.preemptions));
    }
    std::printf("\nOpen loop (Poisson arrivals):\n\n");
    std::printf(
        "| QPS | TTFT p50 (ms) | TTFT p99 (ms) | TPOT p50 (ms) | TPOT p99 (ms) | "
        "mean KV usage |\n|---|---|---|---|---|---|\n");
    for (double qps : {1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0}) {
      Load load(o, *profile);
      const auto requests = static_cast<int64_t>(std::max(300.0, qps * 60));
      auto r = load.open(qps, requests);
      std::printf("| %.0f | %.1f | %.1f | %.2f | %.2f | %.2f |\n", qps, percentile(r.ttft, 0.5),
                  percentile(r.ttft, 0.99), percentile(r.tpot, 0.5), percentile(r.tpot, 0.99),
                  r.kv_sum / std::max<int64_t>(1, r.kv_samples));
    }
    // ShareGPT-like burst: 200 requests at once, lengths from the sharegpt preset.
    llmd::workload::GenerateOptions gen;
    gen.seed = o.seed;
    gen.stages = {{1000, 1}};
    gen.max_requests = 200;
    const auto trace = llmd::workload::generate(*llmd::workload::preset("sharegpt"), gen);
    std::vector<std::pair<int64_t, int64_t>> lengths;
    double in_sum = 0, out_sum = 0;
    for (const auto& r : trace.requests) {
      lengths.emplace_back(r.question_len, r.max_tokens);
      in_sum += static_cast<double>(r.question_len);
      out_sum += static_cast<double>(r.max_tokens);
    }
    Load load(o, *profile);
    const double rps = load.burst(lengths);
    std::printf(
        "\nBurst of %zu sharegpt-preset requests at t=0 (mean input %.0f, mean output %.0f "
        "tokens): %.1f req/s\n",
        lengths.size(), in_sum / static_cast<double>(lengths.size()),
        out_sum / static_cast<double>(lengths.size()), rps);
    // vLLM CI latency test: 8 requests x (32 in, 128 out) at once.
    Load latency(o, *profile);
    std::vector<std::pair<int64_t, int64_t>> eight(8, {32, 128});
    const double eight_rps = latency.burst(eight);
    std::printf("Batch of 8 x (32 in, 128 out) at t=0: end-to-end %.0f ms\n", 8 / eight_rps * 1000);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sim_calibrate: %s\n", e.what());
    return 2;
  }
}
