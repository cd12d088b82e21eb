// PodRegistry::candidates() at pool sizes around the EPP's 100-pod benchmark: what every
// scheduling cycle (and the admission gate) pays to take the pool, alone and with two threads
// taking it at once, and what a scrape answer pays to publish (issue 29 item 6). Pods look like
// Kubernetes pods (long names, a few labels, one served model), or, for BM_CandidatesBare, like
// bench/epp_overhead's (pod-N, no labels), whose copies were cheap already.
//   pool_candidates_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "epp/datastore/pod_registry.h"

namespace {

using llmd::epp::PodConfig;
using llmd::epp::PodMetrics;
using llmd::epp::PodRegistry;
const auto kNow = std::chrono::steady_clock::time_point(std::chrono::hours(1));

std::string pod_name(int i) {
  return "vllm-llama-3-8b-instruct-7d9f8c6b5-" + std::to_string(i);
}

PodMetrics metrics(int i) {
  PodMetrics m;
  m.kv_cache_usage = 0.01 * (i % 100);
  m.waiting = i % 7;
  m.running = i % 13;
  m.models = {"meta-llama/Llama-3.1-8B-Instruct"};
  m.scraped_at = kNow;
  return m;
}

std::unique_ptr<PodRegistry> make_pool(int pods, bool bare) {
  auto r = std::make_unique<PodRegistry>(std::chrono::seconds(2));
  std::vector<PodConfig> configs;
  for (int i = 0; i < pods; ++i) {
    if (bare) {
      configs.push_back({"pod-" + std::to_string(i), "127.0.0.1:" + std::to_string(20000 + i), {}});
    } else {
      configs.push_back(
          {pod_name(i),
           "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":8000",
           {{"role", "decode"}, {"class", "h100"}, {"zone", "us-east-1a"}}});
    }
  }
  r->set_pods(configs);
  for (int i = 0; i < pods; ++i) {
    PodMetrics m = metrics(i);
    if (bare) {
      m.models = {"m"};
    }
    r->update_metrics(configs[static_cast<std::size_t>(i)].name, m);
  }
  return r;
}

// One registry per pool size, shared by the threads of a threaded run.
PodRegistry& pool(int pods) {
  static std::vector<std::unique_ptr<PodRegistry>> pools(1001);
  auto& r = pools[static_cast<std::size_t>(pods)];
  if (!r) {
    r = make_pool(pods, false);
  }
  return *r;
}

void BM_Candidates(benchmark::State& state) {
  PodRegistry& r = pool(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    auto c = r.candidates(kNow);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Candidates)->Arg(10)->Arg(100)->Arg(1000);
BENCHMARK(BM_Candidates)->Arg(100)->Threads(2)->UseRealTime();

void BM_CandidatesBare(benchmark::State& state) {
  static const auto r = make_pool(100, true);
  for (auto _ : state) {
    auto c = r->candidates(kNow);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CandidatesBare);

// A scrape answer: one pod's metrics into the registry (the scraper's 20 rounds/s x pods).
void BM_UpdateMetrics(benchmark::State& state) {
  const int pods = static_cast<int>(state.range(0));
  PodRegistry& r = pool(pods);
  int i = 0;
  for (auto _ : state) {
    r.update_metrics(pod_name(i), metrics(i));
    i = (i + 1) % pods;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UpdateMetrics)->Arg(100)->Arg(1000);

}  // namespace

BENCHMARK_MAIN();
