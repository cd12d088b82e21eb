#include "common/config/logging.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace llmd::config {

namespace {

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// zap's level names.
const char* zap_level(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "panic";
    default:
      return "info";
  }
}

std::string format_time(std::chrono::system_clock::time_point t, const std::string& encoding) {
  using namespace std::chrono;
  const auto ns = duration_cast<nanoseconds>(t.time_since_epoch()).count();
  if (encoding == "epoch") {
    return fmt::format("{:.6f}", static_cast<double>(ns) / 1e9);
  }
  if (encoding == "millis") {
    return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6);
  }
  if (encoding == "nano") {
    return std::to_string(ns);
  }
  const std::time_t secs = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char base[32];
  std::strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
  const long frac = static_cast<long>(ns % 1000000000);
  std::string out = base;
  if (encoding == "rfc3339nano") {
    out += fmt::format(".{:09d}", frac);
  } else if (encoding != "rfc3339") {
    out += fmt::format(".{:03d}", frac / 1000000);
  }
  out += "Z";
  out = "\"" + out + "\"";
  return out;
}

class JsonFormatter final : public spdlog::formatter {
 public:
  JsonFormatter(std::string logger, std::string time_encoding)
      : logger_(std::move(logger)), time_encoding_(std::move(time_encoding)) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    std::string ts = format_time(msg.time, time_encoding_);
    const std::string line = json_log_line(zap_level(msg.level), ts, logger_,
                                           std::string(msg.payload.data(), msg.payload.size()));
    dest.append(line.data(), line.data() + line.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(logger_, time_encoding_);
  }

 private:
  const std::string logger_;
  const std::string time_encoding_;
};

}  // namespace

std::string json_log_line(const std::string& level, const std::string& ts,
                          const std::string& logger, const std::string& message) {
  std::string out = "{\"level\":";
  append_json_string(out, level);
  // `ts` is a number (epoch encodings) or an already quoted string.
  out += ",\"ts\":" + ts + ",\"logger\":";
  append_json_string(out, logger);
  out += ",\"msg\":";
  append_json_string(out, message);
  out += '}';
  return out;
}

void init_logging(const std::string& level, const std::string& service, LogFormat format) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    throw std::invalid_argument("--log-level: unknown level '" + level + "'");
  }
  static const char* const kEncodings[] = {"iso8601", "rfc3339", "rfc3339nano",
                                           "epoch",   "millis",  "nano"};
  if (std::find(std::begin(kEncodings), std::end(kEncodings), format.time_encoding) ==
      std::end(kEncodings)) {
    throw std::invalid_argument("--zap-time-encoding: unknown encoding '" + format.time_encoding +
                                "' (iso8601, rfc3339, rfc3339nano, epoch, millis, nano)");
  }
  auto logger = format.json ? spdlog::stderr_logger_mt(service) : spdlog::stderr_color_mt(service);
  spdlog::set_default_logger(logger);
  if (format.json) {
    spdlog::set_formatter(std::make_unique<JsonFormatter>(service, format.time_encoding));
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [" + service + "] %v");
  }
  spdlog::set_level(lvl);
}

}  // namespace llmd::config
