#pragma once
// Reads the gauges the EPP needs (queue, running, KV usage, cache geometry, served models) out of
// a Prometheus text exposition, by an engine's mapping (epp/datastore/scrape_config.h).
#include <optional>
#include <string_view>

#include "epp/datastore/scrape_config.h"
#include "epp/interface/endpoint.h"

namespace llmd::epp {

// nullopt when the required gauges (waiting, running, one of the KV names) are missing.
// KV: vllm:kv_cache_usage_perc, falling back to vllm:gpu_cache_usage_perc. Block size and
// number of GPU blocks from vllm:cache_config_info labels (defaults kept when absent).
std::optional<PodMetrics> parse_vllm_metrics(std::string_view text);

// By `mapping`: nullopt when a gauge it names for queue, running or KV usage is missing (the
// KV fallback stands in for the KV gauge). A spec with labels reads the first sample carrying
// them all. Served models: the model_name labels of the running gauge. The built-in vLLM
// mapping takes parse_vllm_metrics, the fast path this EPP always used (where a gauge has
// several samples, e.g. one per data-parallel engine, it reads the last).
std::optional<PodMetrics> parse_engine_metrics(std::string_view text, const EngineMapping& mapping);

}  // namespace llmd::epp
