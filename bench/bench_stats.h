#pragma once
// Small helpers shared by the load generators in bench/.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace llmd::bench {

// Nearest-rank percentile, q in [0,1]; 0 for no samples.
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) {
    return 0;
  }
  std::size_t idx = std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())));
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

}  // namespace llmd::bench
