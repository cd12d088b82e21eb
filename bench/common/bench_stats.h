#pragma once
// Small helpers shared by the load generators in bench/.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace llmd::bench {

// Nearest-rank percentile, q in [0,1]; 0 for no samples.
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) {
    return 0;
  }
  std::size_t idx =
      std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(idx), v.end());
  return v[idx];
}

// "1,10,100" -> {1, 10, 100}.
inline std::vector<double> parse_number_list(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) {
      out.push_back(std::stod(item));
    }
  }
  return out;
}

// CPU seconds (user + system) of one process, from /proc/<pid>/stat or /proc/self/stat.
inline double process_cpu_seconds(const std::string& stat_path) {
  std::ifstream in(stat_path);
  std::string text;
  std::getline(in, text);
  // comm (field 2) may contain spaces: count fields from the closing parenthesis.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 > text.size()) {
    return 0;
  }
  std::istringstream ss(text.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; ss >> field; ++i) {
    if (i == 14) {
      utime = std::stod(field);
    } else if (i == 15) {
      stime = std::stod(field);
      break;
    }
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Busy CPU seconds of the whole machine (all CPUs, everything but idle and iowait; guest time
// is already inside user): the machine is shared, so benchmarks report the load they did not
// cause.
inline double machine_busy_cpu_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double v[8] = {};  // user nice system idle iowait irq softirq steal
  in >> cpu;
  for (double& x : v) {
    in >> x;
  }
  return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The CPU's "model name" from /proc/cpuinfo ("unknown" when absent): benchmark reports name
// the host, since the same 2 cores differ between hosts.
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      const auto start =
          colon == std::string::npos ? std::string::npos : line.find_first_not_of(" \t", colon + 1);
      if (start != std::string::npos) {
        return line.substr(start);
      }
    }
  }
  return "unknown";
}

}  // namespace llmd::bench
