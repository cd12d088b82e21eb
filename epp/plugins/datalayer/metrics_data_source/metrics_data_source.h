#pragma once
// metrics-data-source: upstream's data-layer source of the pods' metrics. Says how the scraper
// fetches each pod's exposition: GET <scheme>://<pod address><path>. Immutable.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/scheduler/config_plugins.h"
#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class MetricsDataSourcePlugin final : public PluginBase<MetricsDataSource> {
 public:
  static constexpr std::string_view kType = "metrics-data-source";

  struct Config {
    std::string scheme = "http";     // http | https
    std::string path = "/metrics";   // a leading '/' is added when missing (as upstream's URL)
    bool insecureSkipVerify = true;  // https: accept any certificate (upstream's default)
    std::string validate() const;
  };

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  MetricsDataSourcePlugin(std::string name, const Config& config);

  // MetricsDataSource
  const Target& target() const override { return target_; }

 private:
  Target target_;
};

}  // namespace llmd::epp
