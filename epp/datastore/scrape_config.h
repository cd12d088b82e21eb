#pragma once
// What the scraper asks each pod for and how it reads the answer: the data layer of upstream's
// EndpointPickerConfig (plugins `metrics-data-source` and `core-metrics-extractor`,
// epp/plugins/datalayer/). The defaults are what this EPP always did: GET http://<pod>/metrics,
// vLLM's gauge names. Plain immutable data, built by the config loader, shared by the scraper
// as shared_ptr<const ScrapeConfig>.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace llmd::epp {

// One metric of an exposition: its name and the label values a sample must carry, written as a
// PromQL instant-vector selector, `name` or `name{label=value,...}` (values quoted or not).
struct MetricSpec {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // sorted by label name
  bool operator==(const MetricSpec&) const = default;
};

// The spec, or an error naming what is wrong with `text`. Only `=` matchers are accepted (upstream
// drops the others silently).
std::variant<MetricSpec, std::string> parse_metric_spec(std::string_view text);
std::string to_string(const MetricSpec& spec);

// Which metrics of one engine's exposition hold the gauges the EPP reads (upstream's Mapping).
// A spec left unset is not read: its value stays 0 (queue, running, KV) or the PodMetrics
// default (cache geometry), and it is not required for the pod to be ready.
struct EngineMapping {
  std::string engine;  // e.g. vllm, sglang, trtllm-serve, triton-tensorrt-llm
  std::optional<MetricSpec> queued, running, kv_usage;
  // Ours, built-in vLLM only: vLLM before 0.9 names the KV gauge vllm:gpu_cache_usage_perc.
  std::optional<MetricSpec> kv_usage_fallback;
  std::optional<MetricSpec> lora;  // validated, not read: no plugin here uses LoRA adapters
  // Cache geometry from an info gauge's labels (vLLM, SGLang) ...
  std::optional<MetricSpec> cache_info;
  std::string block_size_label = "block_size";
  std::string num_blocks_label = "num_gpu_blocks";
  // ... or from two gauges' values (TensorRT-LLM).
  std::optional<MetricSpec> block_size, num_blocks;
  bool operator==(const EngineMapping&) const = default;
};

// Upstream's built-in mappings (GIE v1.5.0 extractor/metrics/factories.go), by engine name;
// null for an engine it does not know.
const EngineMapping* builtin_engine(std::string_view engine);
const std::vector<EngineMapping>& builtin_engines();

struct ScrapeConfig {
  static constexpr std::string_view kDefaultEngineLabel = "inference.networking.k8s.io/engine-type";

  std::string scheme = "http";  // http | https
  std::string path = "/metrics";
  bool insecure_skip_verify = true;  // https only: accept any certificate (upstream's default)
  uint16_t port = 0;  // 0: the pod's serving port (upstream's deprecated metrics-port flag)
  // A pod whose label `engine_label_key` names an engine is read with that engine's mapping;
  // every other pod with `default_engine`'s.
  std::string engine_label_key = std::string(kDefaultEngineLabel);
  std::string default_engine = "vllm";
  std::vector<EngineMapping> engines = builtin_engines();

  // The mapping for a pod with these labels (never null once validate() passed).
  const EngineMapping* mapping_for(const std::map<std::string, std::string>& labels) const;
  // "" when usable, else what is wrong (the default engine unknown, a name twice).
  std::string validate() const;
  bool operator==(const ScrapeConfig&) const = default;
};

}  // namespace llmd::epp
