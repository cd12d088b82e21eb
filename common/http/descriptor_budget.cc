#include "common/http/descriptor_budget.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <limits>

namespace llmd::http {

std::size_t DescriptorBudget::capacity_for(std::size_t limit, std::size_t open_now) {
  // Beyond what is open, an eighth is kept back, at least 16 (probes, a few clients) and at most
  // 1,024 (enough for a large pool's upstream and scrape connections beyond the ones counted
  // per connection). At `ulimit -n 256` the EPP has ~36 open at start: without counting them a
  // full budget left it nothing, and the health port's accept failed with EMFILE.
  const std::size_t reserve = open_now + std::clamp<std::size_t>(limit / 8, 16, 1024);
  return limit > reserve ? limit - reserve : 1;
}

namespace {

std::size_t open_descriptors() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(d)) {
      n += e->d_name[0] != '.' ? 1 : 0;
    }
    ::closedir(d);
    return n > 0 ? n - 1 : 0;  // the directory's own descriptor
  }
  return 0;
}

}  // namespace

DescriptorBudget& DescriptorBudget::process() {
  static DescriptorBudget budget([] {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > std::numeric_limits<std::size_t>::max() / 2) {
      return std::numeric_limits<std::size_t>::max() / 2;
    }
    return capacity_for(static_cast<std::size_t>(rl.rlim_cur), open_descriptors());
  }());
  return budget;
}

}  // namespace llmd::http
