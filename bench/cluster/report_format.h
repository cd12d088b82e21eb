#pragma once
// Number formatting shared by the Markdown reports (report.cc, suite_report.cc).
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>

namespace llmd::cluster::format {

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}
// Milliseconds with a sensible number of digits.
inline std::string ms(double v) {
  if (!std::isfinite(v)) return "-";
  if (v >= 100) return fmt("%.0f", v);
  if (v >= 10) return fmt("%.1f", v);
  return fmt("%.2f", v);
}
inline std::string pct(double frac) {
  return std::isfinite(frac) ? fmt("%.1f%%", 100.0 * frac) : "-";
}
inline std::string num(double v) {
  return std::isfinite(v) ? fmt("%.0f", v) : "-";
}
// Relative difference with one decimal, so that a small loss never reads "+0%".
inline std::string rel(double r) {
  return std::isfinite(r) ? fmt("%+.1f%%", 100.0 * r) : "-";
}

inline std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
  return buf;
}

}  // namespace llmd::cluster::format
