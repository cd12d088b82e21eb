#pragma once
// Config reload without a restart: check() re-reads the pool file and, when the pool file, its
// pipeline file or its loadBalancing file changed (by modification time), hands the new config
// to `apply`. A new config that does not load is logged and the running one kept. A pool file
// that does not parse is tried (and logged) again on every check; a pipeline that does not load
// is refused once, and tried again when a file changes.
//
// Threading: check() runs on one thread at a time (the app's timer thread); `apply` runs there.
#include <filesystem>
#include <functional>
#include <string>

#include "epp/config/pool_config.h"

namespace llmd::epp {

class ConfigReloader {
 public:
  // Swaps `next` in; returns "" or, when the pipeline does not load, why (nothing applied).
  using Apply = std::function<std::string(const EppFileConfig& next)>;

  // Records the files' current times: `current` is what is running now.
  ConfigReloader(std::string config_path, PodSource pod_source, const EppFileConfig& current,
                 Apply apply);

  // Returns true when a new config was applied.
  bool check();

 private:
  const std::string config_path_;
  const PodSource pod_source_;
  Apply apply_;
  std::filesystem::file_time_type pool_time_;
  std::filesystem::file_time_type pipeline_time_;
  std::filesystem::file_time_type load_balancing_time_;
};

}  // namespace llmd::epp
