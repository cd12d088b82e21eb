#include "epp/plugins/datalayer/metrics_data_source/metrics_data_source.h"

namespace llmd::epp {

std::string MetricsDataSourcePlugin::Config::validate() const {
  if (scheme != "http" && scheme != "https") {
    return "parameter 'scheme' must be http or https, got '" + scheme + "'";
  }
  if (path.find_first_of(" ?#") != std::string::npos) {
    return "parameter 'path' must be a URL path without spaces, query or fragment, got '" + path +
           "'";
  }
  return {};
}

PluginOrError MetricsDataSourcePlugin::create(const std::string& name, const nlohmann::json& params,
                                              const Handle&) {
  Config c;
  ParamReader r(params);
  r.get("scheme", c.scheme).get("path", c.path).get("insecureSkipVerify", c.insecureSkipVerify);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (auto e = c.validate(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<MetricsDataSourcePlugin>(name, c), {}};
}

MetricsDataSourcePlugin::MetricsDataSourcePlugin(std::string name, const Config& config)
    : PluginBase(kType, std::move(name)) {
  target_.scheme = config.scheme;
  target_.path = config.path.starts_with('/') ? config.path : "/" + config.path;
  target_.insecure_skip_verify = config.insecureSkipVerify;
}

}  // namespace llmd::epp
