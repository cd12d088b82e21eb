#include "common/util/time.h"

#include <cctype>
#include <ctime>

#include <fmt/format.h>

namespace llmd::util {
namespace {

bool digits(std::string_view s, std::size_t pos, std::size_t n, int& out) {
  if (pos + n > s.size()) {
    return false;
  }
  out = 0;
  for (std::size_t i = pos; i < pos + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) {
      return false;
    }
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

}  // namespace

std::string format_rfc3339(SystemTime t) {
  using namespace std::chrono;
  auto us = duration_cast<microseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  long frac = static_cast<long>(us % 1000000);
  if (frac < 0) {
    frac += 1000000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.{:06d}Z", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

std::optional<SystemTime> parse_rfc3339(std::string_view s) {
  int y, mo, d, h, mi, sec;
  if (!digits(s, 0, 4, y) || s.size() < 19 || s[4] != '-' || !digits(s, 5, 2, mo) || s[7] != '-' ||
      !digits(s, 8, 2, d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      !digits(s, 11, 2, h) || s[13] != ':' || !digits(s, 14, 2, mi) || s[16] != ':' ||
      !digits(s, 17, 2, sec)) {
    return std::nullopt;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) {
    return std::nullopt;
  }
  std::size_t pos = 19;
  long micros = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    int n = 0;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      if (n < 6) {
        micros = micros * 10 + (s[pos] - '0');
      }
      ++n;
      ++pos;
    }
    if (n == 0) {
      return std::nullopt;
    }
    for (int i = n; i < 6; ++i) {
      micros *= 10;
    }
  }
  long offset_s = 0;
  if (pos < s.size()) {
    if (s[pos] == 'Z' || s[pos] == 'z') {
      ++pos;
    } else if (s[pos] == '+' || s[pos] == '-') {
      int oh, om;
      if (!digits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
          !digits(s, pos + 4, 2, om)) {
        return std::nullopt;
      }
      offset_s = (s[pos] == '+' ? 1 : -1) * (oh * 3600L + om * 60L);
      pos += 6;
    } else {
      return std::nullopt;
    }
  }
  if (pos != s.size()) {
    return std::nullopt;
  }
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  std::time_t secs = timegm(&tm) - offset_s;
  return SystemTime(std::chrono::seconds(secs)) + std::chrono::microseconds(micros);
}

}  // namespace llmd::util
