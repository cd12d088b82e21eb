#pragma once
// Logging on stderr through spdlog: a timestamped text line (the default), or one JSON object
// per line as controller-runtime's zap JSON encoder writes them (`--zap-encoder json` in the
// Go EPP): {"level":"info","ts":"2026-12-02T00:00:00.000Z","logger":"epp","msg":"..."}.
#include <string>

namespace llmd::config {

struct LogFormat {
  bool json = false;
  // The JSON `ts` field: iso8601 (default), rfc3339, rfc3339nano, epoch (seconds as a float),
  // millis, nano — zap's time encodings.
  std::string time_encoding = "iso8601";
};

// Level one of trace, debug, info, warn, error, critical, off. Throws std::invalid_argument
// on an unknown level or time encoding.
void init_logging(const std::string& level, const std::string& service, LogFormat format = {});

// The JSON line of one message (exposed for tests): `ts` already formatted.
std::string json_log_line(const std::string& level, const std::string& ts,
                          const std::string& logger, const std::string& message);

}  // namespace llmd::config
