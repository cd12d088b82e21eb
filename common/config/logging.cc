#include "common/config/logging.h"

#include <stdexcept>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace llmd::config {

void init_logging(const std::string& level, const std::string& service) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    throw std::invalid_argument("--log-level: unknown level '" + level + "'");
  }
  auto logger = spdlog::stderr_color_mt(service);
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [" + service + "] %v");
  spdlog::set_level(lvl);
}

}  // namespace llmd::config
