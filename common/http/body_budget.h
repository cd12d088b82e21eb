#pragma once
// The request-body bytes a process holds at once, across its servers: the EPP's proxy and its
// gateway (ext_proc) port take from one budget, so a burst of long prompts through either
// ingress, or both, stays within --body-budget-bytes. A request that would pass it is refused
// (503 + Retry-After) before its body is read. Thread-safe.
#include <cstddef>
#include <limits>

#include "common/http/budget.h"

namespace llmd::http {

class BodyBudget : public Budget {
 public:
  // 0 = no budget.
  explicit BodyBudget(std::size_t capacity)
      : Budget(capacity == 0 ? std::numeric_limits<std::size_t>::max() / 2 : capacity) {}
};

}  // namespace llmd::http
