#include "common/http/descriptor_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <limits>

namespace llmd::http {

std::size_t DescriptorBudget::capacity_for(std::size_t limit) {
  // An eighth is kept back, at least 32 (stdio, listeners, event loops, a few clients) and at
  // most 1,024 (enough for a large pool's upstream and scrape connections beyond the ones
  // counted per connection).
  const std::size_t reserve = std::clamp<std::size_t>(limit / 8, 32, 1024);
  return limit > reserve ? limit - reserve : 1;
}

DescriptorBudget& DescriptorBudget::process() {
  static DescriptorBudget budget([] {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > std::numeric_limits<std::size_t>::max() / 2) {
      return std::numeric_limits<std::size_t>::max() / 2;
    }
    return capacity_for(static_cast<std::size_t>(rl.rlim_cur));
  }());
  return budget;
}

}  // namespace llmd::http
