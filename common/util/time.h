#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace llmd::util {

using SystemTime = std::chrono::system_clock::time_point;

// RFC 3339 UTC with microseconds and an explicit offset: "2026-08-11T10:20:30.123456Z".
std::string format_rfc3339(SystemTime t);
inline std::string now_rfc3339() {
  return format_rfc3339(std::chrono::system_clock::now());
}
// Accepts "YYYY-MM-DD[T ]HH:MM:SS[.frac][Z|+HH:MM|-HH:MM]" (no offset = UTC).
std::optional<SystemTime> parse_rfc3339(std::string_view s);

}  // namespace llmd::util
