#include "bench/modelsim/pod_metrics.h"

#include <map>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "common/metrics/exposition.h"

namespace llmd::modelsim {

namespace {

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py).
const prometheus::Histogram::BucketBoundaries kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const prometheus::Histogram::BucketBoundaries kTpotBuckets = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

}  // namespace

struct PodMetrics::Impl {
  explicit Impl(const std::string& model, const sim::EngineConfig& cfg)
      : labels{{"model_name", model}},
        running(prometheus::BuildGauge()
                    .Name("vllm:num_requests_running")
                    .Help("Number of requests in model execution batches.")
                    .Register(registry)
                    .Add(labels)),
        waiting(prometheus::BuildGauge()
                    .Name("vllm:num_requests_waiting")
                    .Help("Number of requests waiting to be processed.")
                    .Register(registry)
                    .Add(labels)),
        kv_usage(prometheus::BuildGauge()
                     .Name("vllm:kv_cache_usage_perc")
                     .Help("KV-cache usage. 1 means 100 percent usage.")
                     .Register(registry)
                     .Add(labels)),
        gpu_cache_usage(prometheus::BuildGauge()
                            .Name("vllm:gpu_cache_usage_perc")
                            .Help("GPU KV-cache usage. 1 means 100 percent usage (old name).")
                            .Register(registry)
                            .Add(labels)),
        prefix_queries(prometheus::BuildCounter()
                           .Name("vllm:prefix_cache_queries_total")
                           .Help("Prefix cache queries, in terms of number of queried tokens.")
                           .Register(registry)
                           .Add(labels)),
        prefix_hits(prometheus::BuildCounter()
                        .Name("vllm:prefix_cache_hits_total")
                        .Help("Prefix cache hits, in terms of number of cached tokens.")
                        .Register(registry)
                        .Add(labels)),
        preemptions(prometheus::BuildCounter()
                        .Name("vllm:num_preemptions_total")
                        .Help("Cumulative number of preemptions from the engine.")
                        .Register(registry)
                        .Add(labels)),
        prompt_tokens(prometheus::BuildCounter()
                          .Name("vllm:prompt_tokens_total")
                          .Help("Number of prefill tokens processed.")
                          .Register(registry)
                          .Add(labels)),
        generation_tokens(prometheus::BuildCounter()
                              .Name("vllm:generation_tokens_total")
                              .Help("Number of generation tokens processed.")
                              .Register(registry)
                              .Add(labels)),
        success(prometheus::BuildCounter()
                    .Name("vllm:request_success_total")
                    .Help("Count of successfully processed requests.")
                    .Register(registry)
                    .Add({{"model_name", model}, {"finished_reason", "length"}})),
        ttft(prometheus::BuildHistogram()
                 .Name("vllm:time_to_first_token_seconds")
                 .Help("Histogram of time to first token in seconds.")
                 .Register(registry)
                 .Add(labels, kTtftBuckets)),
        tpot(prometheus::BuildHistogram()
                 .Name("vllm:time_per_output_token_seconds")
                 .Help("Histogram of time per output token in seconds.")
                 .Register(registry)
                 .Add(labels, kTpotBuckets)),
        e2e(prometheus::BuildHistogram()
                .Name("vllm:e2e_request_latency_seconds")
                .Help("Histogram of end to end request latency in seconds.")
                .Register(registry)
                .Add(labels, kLatencyBuckets)),
        queue(prometheus::BuildHistogram()
                  .Name("vllm:request_queue_time_seconds")
                  .Help("Histogram of time spent in WAITING phase for request.")
                  .Register(registry)
                  .Add(labels, kLatencyBuckets)) {
    prometheus::BuildGauge()
        .Name("vllm:cache_config_info")
        .Help("Information of the LLMEngine CacheConfig")
        .Register(registry)
        .Add({{"model_name", model},
              {"block_size", std::to_string(cfg.block_size)},
              {"num_gpu_blocks", std::to_string(cfg.profile.num_gpu_blocks)},
              {"cache_dtype", "auto"},
              {"enable_prefix_caching", "True"},
              {"gpu_profile", cfg.profile.name}})
        .Set(1);
  }

  static void advance(prometheus::Counter& c, int64_t& last, int64_t now) {
    if (now > last) {
      c.Increment(static_cast<double>(now - last));
      last = now;
    }
  }

  prometheus::Registry registry;
  const std::map<std::string, std::string> labels;
  prometheus::Gauge& running;
  prometheus::Gauge& waiting;
  prometheus::Gauge& kv_usage;
  prometheus::Gauge& gpu_cache_usage;
  prometheus::Counter& prefix_queries;
  prometheus::Counter& prefix_hits;
  prometheus::Counter& preemptions;
  prometheus::Counter& prompt_tokens;
  prometheus::Counter& generation_tokens;
  prometheus::Counter& success;
  prometheus::Histogram& ttft;
  prometheus::Histogram& tpot;
  prometheus::Histogram& e2e;
  prometheus::Histogram& queue;
  int64_t last_queries = 0;
  int64_t last_hits = 0;
  int64_t last_preemptions = 0;
  int64_t last_prompt = 0;
  int64_t last_generation = 0;
};

PodMetrics::PodMetrics(const std::string& model_name, const sim::EngineConfig& config)
    : impl_(std::make_unique<Impl>(model_name, config)) {}

PodMetrics::~PodMetrics() = default;

void PodMetrics::observe_finished(const sim::RequestStats& s) {
  impl_->success.Increment();
  impl_->ttft.Observe(s.ttft_ms() / 1000.0);
  if (s.output_tokens > 1) {
    impl_->tpot.Observe(s.tpot_ms() / 1000.0);
  }
  impl_->e2e.Observe(s.e2e_ms() / 1000.0);
  impl_->queue.Observe(s.queue_ms() / 1000.0);
}

void PodMetrics::update(const sim::SimMetrics& m) {
  auto& i = *impl_;
  i.running.Set(static_cast<double>(m.num_running));
  i.waiting.Set(static_cast<double>(m.num_waiting));
  i.kv_usage.Set(m.kv_usage);
  i.gpu_cache_usage.Set(m.kv_usage);
  Impl::advance(i.prefix_queries, i.last_queries, m.prefix_cache_queries);
  Impl::advance(i.prefix_hits, i.last_hits, m.prefix_cache_hits);
  Impl::advance(i.preemptions, i.last_preemptions, m.num_preemptions);
  Impl::advance(i.prompt_tokens, i.last_prompt, m.prompt_tokens);
  Impl::advance(i.generation_tokens, i.last_generation, m.generation_tokens);
}

std::string PodMetrics::serialize() const {
  return metrics::serialize(impl_->registry);
}

}  // namespace llmd::modelsim
