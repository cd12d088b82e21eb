#pragma once
// core-metrics-extractor: upstream's data-layer extractor of the gauges the EPP reads (queue,
// running, KV usage, cache geometry) out of each pod's exposition, per inference engine: the
// built-in mappings of vLLM, SGLang, trtllm-serve and Triton TensorRT-LLM, which engineConfigs
// may replace or extend, chosen per pod by its engine label. Immutable.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/scheduler/config_plugins.h"
#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class CoreMetricsExtractor final : public PluginBase<MetricsExtractor> {
 public:
  static constexpr std::string_view kType = "core-metrics-extractor";

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  CoreMetricsExtractor(std::string name, Engines engines)
      : PluginBase(kType, std::move(name)), engines_(std::move(engines)) {}

  // MetricsExtractor
  const Engines& engines() const override { return engines_; }

 private:
  Engines engines_;
};

}  // namespace llmd::epp
