#pragma once
// The file descriptors a process may hand to accepted connections: its soft RLIMIT_NOFILE less a
// reserve for what it opens itself (upstream connections, scrapes, feedback, model sync, files,
// the event loops' own descriptors). Every server of the process takes from the one budget, so
// no number of idle clients can leave the process unable to open what it needs; a listener at
// the limit stops accepting (connections wait in the kernel's backlog) until one closes.
// Thread-safe (one atomic).
#include <cstddef>

#include "common/http/budget.h"

namespace llmd::http {

class DescriptorBudget : public Budget {
 public:
  // The process's budget, sized from its soft RLIMIT_NOFILE when first used.
  static DescriptorBudget& process();
  // What a process whose descriptor limit is `limit` may give to connections.
  static std::size_t capacity_for(std::size_t limit);

  explicit DescriptorBudget(std::size_t capacity) : Budget(capacity) {}
};

}  // namespace llmd::http
