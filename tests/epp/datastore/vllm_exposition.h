#pragma once
// A vLLM /metrics answer of the size and shape a real pod serves (vLLM 0.9, V1 engine, one
// model): the Python process and GC metrics, the gauges and counters, and the request
// histograms with their buckets, each family with # HELP and # TYPE lines: 402 lines and 40 KB,
// of which the EPP reads five. For the parser's test and its micro-benchmark
// (bench/metrics_parse_bench.cc).
#include <string>
#include <vector>

#include <fmt/format.h>

namespace llmd::epp::testing {

inline std::string vllm_exposition(int waiting = 2, int running = 5, double kv = 0.375) {
  const std::string labels = R"(engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct")";
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  for (int gen = 0; gen < 3; ++gen) {
    if (gen == 0) {
      family("python_gc_objects_collected_total", "counter", "Objects collected during gc");
    }
    out += fmt::format("python_gc_objects_collected_total{{generation=\"{}\"}} {}.0\n", gen,
                       12345 * (gen + 1));
  }
  family("python_gc_collections_total", "counter", "Times this generation was collected");
  for (int gen = 0; gen < 3; ++gen) {
    out += fmt::format("python_gc_collections_total{{generation=\"{}\"}} {}.0\n", gen,
                       321 * (gen + 1));
  }
  family("python_info", "gauge", "Python platform information");
  out +=
      "python_info{implementation=\"CPython\",major=\"3\",minor=\"12\",patchlevel=\"9\","
      "version=\"3.12.9\"} 1.0\n";
  for (const char* p : {"process_virtual_memory_bytes", "process_resident_memory_bytes",
                        "process_start_time_seconds", "process_cpu_seconds_total",
                        "process_open_fds", "process_max_fds"}) {
    family(p, "gauge", "Process metric.");
    out += fmt::format("{} 1.23456789e+09\n", p);
  }
  family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
  out += fmt::format("vllm:num_requests_running{{{}}} {}.0\n", labels, running);
  family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
  out += fmt::format("vllm:num_requests_waiting{{{}}} {}.0\n", labels, waiting);
  family("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.");
  out += fmt::format("vllm:gpu_cache_usage_perc{{{}}} {}\n", labels, kv);
  family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
  out += fmt::format("vllm:kv_cache_usage_perc{{{}}} {}\n", labels, kv);
  for (const char* c :
       {"vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total"}) {
    family(c, "counter", "A counter of the engine.");
    out += fmt::format("{}{{{}}} 987654.0\n", c, labels);
  }
  family("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const char* reason : {"stop", "length", "abort"}) {
    out += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} 4242.0\n", labels,
                       reason);
  }
  const std::vector<std::string> time_buckets{
      "0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1",  "0.25",  "0.5",   "0.75",
      "1.0",   "2.5",   "5.0",  "7.5",  "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0"};
  const std::vector<std::string> token_buckets{"1.0",    "2.0",    "5.0",     "10.0",   "20.0",
                                               "50.0",   "100.0",  "200.0",   "500.0",  "1000.0",
                                               "2000.0", "5000.0", "10000.0", "20000.0"};
  auto histogram = [&](const char* name, const std::vector<std::string>& buckets) {
    family(name, "histogram", "A histogram of the engine.");
    int n = 0;
    for (const auto& le : buckets) {
      n += 17;
      out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}.0\n", name, labels, le, n);
    }
    out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}.0\n", name, labels, n);
    out += fmt::format("{}_count{{{}}} {}.0\n", name, labels, n);
    out += fmt::format("{}_sum{{{}}} 12345.678\n", name, labels);
  };
  for (const char* h : {"vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds",
                        "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                        "vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds",
                        "vllm:request_decode_time_seconds", "vllm:inter_token_latency_seconds"}) {
    histogram(h, time_buckets);
  }
  for (const char* h : {"vllm:iteration_tokens_total", "vllm:request_prompt_tokens",
                        "vllm:request_generation_tokens", "vllm:request_max_num_generation_tokens",
                        "vllm:request_params_max_tokens", "vllm:request_params_n"}) {
    histogram(h, token_buckets);
  }
  family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  out +=
      "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",calculate_kv_scales=\"False\","
      "cpu_offload_gb=\"0\",enable_prefix_caching=\"True\",engine=\"0\",gpu_memory_utilization="
      "\"0.9\",is_attention_free=\"False\",num_cpu_blocks=\"None\",num_gpu_blocks=\"29127\","
      "num_gpu_blocks_override=\"None\",prefix_caching_hash_algo=\"builtin\",sliding_window="
      "\"None\",swap_space=\"4\",swap_space_bytes=\"4294967296\"} 1.0\n";
  return out;
}

}  // namespace llmd::epp::testing
