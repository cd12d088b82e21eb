#include "epp/app/config_reloader.h"

#include <spdlog/spdlog.h>

namespace llmd::epp {

namespace {

// A missing file reads as the epoch, so deleting a watched file counts as a change.
std::filesystem::file_time_type mtime(const std::string& path) {
  std::error_code ec;
  auto t = std::filesystem::last_write_time(path, ec);
  return ec ? std::filesystem::file_time_type{} : t;
}

}  // namespace

ConfigReloader::ConfigReloader(std::string config_path, PodSource pod_source,
                               const EppFileConfig& current, Apply apply)
    : config_path_(std::move(config_path)),
      pod_source_(pod_source),
      apply_(std::move(apply)),
      pool_time_(mtime(config_path_)),
      pipeline_time_(current.pipeline_path.empty() ? pool_time_ : mtime(current.pipeline_path)),
      load_balancing_time_(mtime(current.load_balancing_path)) {}

bool ConfigReloader::check() {
  try {
    const auto pool_time = mtime(config_path_);
    EppFileConfig next = load_epp_config(config_path_, pod_source_);
    const auto pipeline_time = next.pipeline_path.empty() ? pool_time : mtime(next.pipeline_path);
    const auto load_balancing_time = mtime(next.load_balancing_path);
    if (pool_time == pool_time_ && pipeline_time == pipeline_time_ &&
        load_balancing_time == load_balancing_time_) {
      return false;
    }
    pool_time_ = pool_time;
    pipeline_time_ = pipeline_time;
    load_balancing_time_ = load_balancing_time;
    if (auto error = apply_(next); !error.empty()) {
      spdlog::error("config reload refused, keeping the current pipeline: {}", error);
      return false;
    }
    spdlog::info("config reloaded: {} pods, {} objectives, {} routing rules, router queue {}",
                 next.pods.size(), next.objectives->size(),
                 next.load_balancing ? next.load_balancing->rules.size() : 0,
                 next.router_queue ? "on" : "off");
    return true;
  } catch (const std::exception& e) {
    spdlog::error("config reload refused, keeping the current config: {}", e.what());
    return false;
  }
}

}  // namespace llmd::epp
