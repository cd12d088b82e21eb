#pragma once
// Reads the vLLM gauges the EPP needs out of a Prometheus text exposition.
#include <optional>
#include <string_view>

#include "epp/interface/endpoint.h"

namespace llmd::epp {

// nullopt when the required gauges (waiting, running, one of the KV names) are missing.
// KV: vllm:kv_cache_usage_perc, falling back to vllm:gpu_cache_usage_perc. Block size and
// number of GPU blocks from vllm:cache_config_info labels (defaults kept when absent).
std::optional<PodMetrics> parse_vllm_metrics(std::string_view text);

}  // namespace llmd::epp
