#pragma once
#include <string>

namespace llmd::config {
// Sets up spdlog on stderr with a timestamped pattern; level one of trace, debug, info, warn,
// error, off. Throws std::invalid_argument on an unknown level.
void init_logging(const std::string& level, const std::string& service);
}  // namespace llmd::config
