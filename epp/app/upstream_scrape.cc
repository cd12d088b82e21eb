#include "epp/app/upstream_scrape.h"

#include <stdexcept>
#include <variant>

namespace llmd::epp {

namespace {

void set_spec(std::optional<MetricSpec>& field, const std::string& text, const char* flag) {
  if (text.empty()) {
    return;
  }
  auto parsed = parse_metric_spec(text);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    throw std::invalid_argument(std::string(flag) + ": " + *error);
  }
  field = std::get<MetricSpec>(std::move(parsed));
}

}  // namespace

ScrapeConfig with_upstream_flags(ScrapeConfig config, const UpstreamSettings& flags) {
  if (!flags.metrics_scheme.empty()) {
    config.scheme = flags.metrics_scheme;
  }
  if (!flags.metrics_path.empty()) {
    config.path = flags.metrics_path;
  }
  if (!flags.metrics_insecure_skip_verify) {
    config.insecure_skip_verify = false;
  }
  if (flags.metrics_port != 0) {
    config.port = flags.metrics_port;
  }
  for (EngineMapping& m : config.engines) {
    if (m.engine != config.default_engine) {
      continue;
    }
    set_spec(m.queued, flags.queued_metric, "--total-queued-requests-metric");
    set_spec(m.running, flags.running_metric, "--total-running-requests-metric");
    if (!flags.kv_usage_metric.empty()) {
      set_spec(m.kv_usage, flags.kv_usage_metric, "--kv-cache-usage-percentage-metric");
      m.kv_usage_fallback.reset();
    }
    set_spec(m.lora, flags.lora_metric, "--lora-info-metric");
    set_spec(m.cache_info, flags.cache_info_metric, "--cache-info-metric");
  }
  return config;
}

}  // namespace llmd::epp
