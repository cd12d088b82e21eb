#pragma once
// The file descriptors a process may hand to accepted connections: its soft RLIMIT_NOFILE less
// what it has open when the budget is first used (listeners, event loops, logs) and a reserve
// for what it opens later itself (upstream connections, scrapes, feedback, model sync, files,
// the health and metrics ports' connections, which take nothing from the budget). Every server of
// the process takes from the one budget, so no number of idle clients can leave the process unable
// to open what it needs; a listener at the limit stops accepting (connections wait in the kernel's
// backlog) until one closes. Thread-safe (one atomic).
#include <cstddef>

#include "common/http/budget.h"

namespace llmd::http {

class DescriptorBudget : public Budget {
 public:
  // The process's budget, sized from its soft RLIMIT_NOFILE when first used.
  static DescriptorBudget& process();
  // What a process whose descriptor limit is `limit`, with `open_now` descriptors open, may give
  // to connections.
  static std::size_t capacity_for(std::size_t limit, std::size_t open_now = 0);

  explicit DescriptorBudget(std::size_t capacity) : Budget(capacity) {}
};

}  // namespace llmd::http
