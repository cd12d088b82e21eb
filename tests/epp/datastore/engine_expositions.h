#pragma once
// /metrics answers of the engines upstream's core-metrics-extractor knows besides vLLM, in the
// shape each serves them (HELP/TYPE lines, the gauges read among others that are not): SGLang,
// trtllm-serve (served at /prometheus/metrics) and Triton with the TensorRT-LLM backend. For
// the parser's test, the scraper's test and the EPP's end-to-end data-layer test.
#include <string>

#include <fmt/format.h>

namespace llmd::epp::testing {

inline std::string sglang_exposition(int waiting = 2, int running = 5, double kv = 0.375) {
  const std::string m = R"(model_name="meta-llama/Llama-3.1-8B-Instruct")";
  return fmt::format(
      "# HELP sglang:num_running_reqs The number of running requests.\n"
      "# TYPE sglang:num_running_reqs gauge\n"
      "sglang:num_running_reqs{{{0}}} {2}.0\n"
      "# HELP sglang:num_used_tokens The number of used tokens.\n"
      "# TYPE sglang:num_used_tokens gauge\n"
      "sglang:num_used_tokens{{{0}}} 12345.0\n"
      "# HELP sglang:token_usage The token usage.\n"
      "# TYPE sglang:token_usage gauge\n"
      "sglang:token_usage{{{0}}} {3}\n"
      "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n"
      "# TYPE sglang:num_queue_reqs gauge\n"
      "sglang:num_queue_reqs{{{0}}} {1}.0\n"
      "# HELP sglang:cache_hit_rate The prefix cache hit rate.\n"
      "# TYPE sglang:cache_hit_rate gauge\n"
      "sglang:cache_hit_rate{{{0}}} 0.5\n"
      "# HELP sglang:cache_config_info The cache configuration.\n"
      "# TYPE sglang:cache_config_info gauge\n"
      "sglang:cache_config_info{{{0},num_pages=\"70000\",page_size=\"32\"}} 1.0\n"
      "# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.\n"
      "# TYPE sglang:time_to_first_token_seconds histogram\n"
      "sglang:time_to_first_token_seconds_bucket{{{0},le=\"0.1\"}} 7.0\n"
      "sglang:time_to_first_token_seconds_sum{{{0}}} 1.5\n"
      "sglang:time_to_first_token_seconds_count{{{0}}} 9.0\n",
      m, waiting, running, kv);
}

inline std::string trtllm_serve_exposition(int waiting = 2, int running = 5, double kv = 0.375) {
  const std::string m = R"(engine_type="trtllm",model_name="Qwen/Qwen3-32B")";
  return fmt::format(
      "# HELP trtllm_num_requests_running Number of requests currently running.\n"
      "# TYPE trtllm_num_requests_running gauge\n"
      "trtllm_num_requests_running{{{0}}} {2}.0\n"
      "# HELP trtllm_num_requests_waiting Number of requests waiting.\n"
      "# TYPE trtllm_num_requests_waiting gauge\n"
      "trtllm_num_requests_waiting{{{0}}} {1}.0\n"
      "# HELP trtllm_kv_cache_utilization KV cache utilization.\n"
      "# TYPE trtllm_kv_cache_utilization gauge\n"
      "trtllm_kv_cache_utilization{{{0}}} {3}\n"
      "# HELP trtllm_kv_cache_tokens_per_block Tokens per KV cache block.\n"
      "# TYPE trtllm_kv_cache_tokens_per_block gauge\n"
      "trtllm_kv_cache_tokens_per_block{{{0}}} 64.0\n"
      "# HELP trtllm_kv_cache_max_blocks Maximum number of KV cache blocks.\n"
      "# TYPE trtllm_kv_cache_max_blocks gauge\n"
      "trtllm_kv_cache_max_blocks{{{0}}} 8192.0\n"
      "# HELP trtllm_request_success_total Count of successfully processed requests.\n"
      "# TYPE trtllm_request_success_total counter\n"
      "trtllm_request_success_total{{{0},finished_reason=\"stop\"}} 42.0\n",
      m, waiting, running, kv);
}

inline std::string triton_trtllm_exposition(int waiting = 2, int running = 5, double kv = 0.375) {
  const std::string m = R"(model="tensorrt_llm",version="1")";
  return fmt::format(
      "# HELP nv_inference_request_success Number of successful inference requests\n"
      "# TYPE nv_inference_request_success counter\n"
      "nv_inference_request_success{{model=\"ensemble\",version=\"1\"}} 100\n"
      "# HELP nv_trt_llm_request_metrics TRT LLM request metrics\n"
      "# TYPE nv_trt_llm_request_metrics gauge\n"
      "nv_trt_llm_request_metrics{{{0},request_type=\"context\"}} 1\n"
      "nv_trt_llm_request_metrics{{{0},request_type=\"scheduled\"}} {2}\n"
      "nv_trt_llm_request_metrics{{{0},request_type=\"max\"}} 64\n"
      "nv_trt_llm_request_metrics{{{0},request_type=\"active\"}} 7\n"
      "nv_trt_llm_request_metrics{{{0},request_type=\"waiting\"}} {1}\n"
      "# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics\n"
      "# TYPE nv_trt_llm_kv_cache_block_metrics gauge\n"
      "nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type=\"tokens_per\",{0}}} 128\n"
      "nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type=\"used\",{0}}} 1024\n"
      "nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type=\"free\",{0}}} 3072\n"
      "nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type=\"max\",{0}}} 4096\n"
      "nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type=\"fraction\",{0}}} {3}\n",
      m, waiting, running, kv);
}

}  // namespace llmd::epp::testing
