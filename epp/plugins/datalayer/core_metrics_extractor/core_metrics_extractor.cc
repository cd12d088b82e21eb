#include "epp/plugins/datalayer/core_metrics_extractor/core_metrics_extractor.h"

#include <set>

namespace llmd::epp {
namespace {

// A spec parameter: "" leaves the gauge unread (upstream's meaning), else a selector.
std::string read_spec(ParamReader& r, std::string_view key, std::optional<MetricSpec>& out) {
  std::string text;
  r.get(key, text);
  out.reset();
  if (text.empty()) {
    return {};
  }
  auto parsed = parse_metric_spec(text);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    return "parameter '" + std::string(key) + "': " + *error;
  }
  out = std::get<MetricSpec>(std::move(parsed));
  return {};
}

// One entry of engineConfigs (upstream's engineConfigParams). Like upstream, an entry replaces
// the built-in mapping of its name whole: a spec it leaves out is not read.
std::variant<EngineMapping, std::string> read_engine(const nlohmann::json& entry) {
  if (!entry.is_object()) {
    return std::string("must be a mapping, got ") + entry.type_name();
  }
  EngineMapping m;
  ParamReader r(entry);
  r.get("name", m.engine)
      .get("cacheBlockSizeLabelName", m.block_size_label)
      .get("cacheNumBlocksLabelName", m.num_blocks_label);
  std::string error;
  for (auto [key, slot] :
       {std::pair{"queuedRequestsSpec", &m.queued}, std::pair{"runningRequestsSpec", &m.running},
        std::pair{"kvUsageSpec", &m.kv_usage}, std::pair{"loraSpec", &m.lora},
        std::pair{"cacheInfoSpec", &m.cache_info}, std::pair{"cacheBlockSizeSpec", &m.block_size},
        std::pair{"cacheNumBlocksSpec", &m.num_blocks}}) {
    if (auto e = read_spec(r, key, *slot); error.empty()) {
      error = e;
    }
  }
  if (auto e = r.finish(); !e.empty()) {
    return e;
  }
  if (!error.empty()) {
    return error;
  }
  if (m.engine.empty()) {
    return std::string("parameter 'name' is required");
  }
  if (m.engine == "default") {
    return std::string("name 'default' is reserved");
  }
  if (m.block_size_label.empty()) {
    m.block_size_label = "block_size";
  }
  if (m.num_blocks_label.empty()) {
    m.num_blocks_label = "num_gpu_blocks";
  }
  return m;
}

}  // namespace

PluginOrError CoreMetricsExtractor::create(const std::string& name, const nlohmann::json& params,
                                           const Handle&) {
  Engines e;
  nlohmann::json configs;
  ParamReader r(params);
  r.get("engineLabelKey", e.engine_label_key)
      .get("defaultEngine", e.default_engine)
      .get("engineConfigs", configs);
  if (auto error = r.finish(); !error.empty()) {
    return PluginOrError::fail(error);
  }
  if (e.engine_label_key.empty()) {
    e.engine_label_key = std::string(ScrapeConfig::kDefaultEngineLabel);
  }
  if (e.default_engine.empty()) {
    e.default_engine = "vllm";
  }
  if (!configs.is_null() && !configs.is_array()) {
    return PluginOrError::fail("parameter 'engineConfigs' must be a list, got " +
                               std::string(configs.type_name()));
  }
  // The entries given first, then every built-in engine they do not name (upstream's order).
  std::vector<EngineMapping> engines;
  std::set<std::string> named;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    auto made = read_engine(configs[i]);
    if (auto* error = std::get_if<std::string>(&made)) {
      return PluginOrError::fail("engineConfigs[" + std::to_string(i) + "]: " + *error);
    }
    auto& m = std::get<EngineMapping>(made);
    if (!named.insert(m.engine).second) {
      return PluginOrError::fail("engineConfigs[" + std::to_string(i) + "]: engine '" + m.engine +
                                 "' is configured twice");
    }
    engines.push_back(std::move(m));
  }
  for (const auto& builtin : builtin_engines()) {
    if (!named.count(builtin.engine)) {
      engines.push_back(builtin);
    }
  }
  e.engines = std::move(engines);
  ScrapeConfig check;
  check.default_engine = e.default_engine;
  check.engines = e.engines;
  if (auto error = check.validate(); !error.empty()) {
    return PluginOrError::fail(error);
  }
  return {std::make_shared<CoreMetricsExtractor>(name, std::move(e)), {}};
}

}  // namespace llmd::epp
