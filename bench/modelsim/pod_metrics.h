#pragma once
// vLLM's Prometheus metrics of one simulated pod, with vLLM's names and a `model_name` label:
// gauges vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc (and the
// old name vllm:gpu_cache_usage_perc), vllm:cache_config_info{block_size,num_gpu_blocks} 1;
// counters vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total,
// vllm:num_preemptions_total, vllm:prompt_tokens_total, vllm:generation_tokens_total,
// vllm:request_success_total{finished_reason}; histograms vllm:time_to_first_token_seconds,
// vllm:time_per_output_token_seconds, vllm:e2e_request_latency_seconds,
// vllm:request_queue_time_seconds (simulated-GPU seconds, i.e. independent of --time-scale).
// Built once per pod; updated on the pod's strand.
#include <memory>
#include <string>

#include "bench/sim/sim_engine.h"

namespace llmd::modelsim {

class PodMetrics {
 public:
  PodMetrics(const std::string& model_name, const sim::EngineConfig& config);
  ~PodMetrics();
  PodMetrics(const PodMetrics&) = delete;
  PodMetrics& operator=(const PodMetrics&) = delete;

  void observe_finished(const sim::RequestStats& stats);
  // Sets the gauges and advances the counters to the engine's snapshot.
  void update(const sim::SimMetrics& m);
  std::string serialize() const;  // Prometheus text format 0.0.4

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::modelsim
