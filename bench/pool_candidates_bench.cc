// PodRegistry::candidates() at pool sizes around the EPP's 100-pod benchmark: what every
// scheduling cycle (and the admission gate) pays to take the pool, alone and with two threads
// taking it at once, and what a scrape answer pays to publish (issue 29 item 6). Pods look like
// Kubernetes pods: long names, a few labels, one served model.
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

std::string pod_name(int i) { return "vllm-llama-3-8b-instruct-7d9f8c6b5-" + std::to_string(i); }

PodMetrics metrics(int i) {
  PodMetrics m;
  m.kv_cache_usage = 0.01 * (i % 100);
  m.waiting = i % 7;
  m.running = i % 13;
  m.models = {"meta-llama/Llama-3.1-8B-Instruct"};
  m.scraped_at = kNow;
  return m;
}

// One registry per pool size, shared by the threads of a threaded run.
PodRegistry& pool(int pods) {
  static std::vector<std::unique_ptr<PodRegistry>> pools(1001);
  auto& r = pools[static_cast<std::size_t>(pods)];
  if (!r) {
    r = std::make_unique<PodRegistry>(std::chrono::seconds(2));
    std::vector<PodConfig> configs;
    for (int i = 0; i < pods; ++i) {
      configs.push_back({pod_name(i), "10.0." + std::to_string(i / 250) + "." +
                                          std::to_string(i % 250) + ":8000",
                         {{"role", "decode"}, {"class", "h100"}, {"zone", "us-east-1a"}}});
    }
    r->set_pods(configs);
    for (int i = 0; i < pods; ++i) {
      r->update_metrics(pod_name(i), metrics(i));
    }
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
BENCHMARK(BM_UpdateMetrics)->Arg(100);

}  // namespace

BENCHMARK_MAIN();
