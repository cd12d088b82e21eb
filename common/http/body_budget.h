#pragma once
// The request-body bytes a process holds at once, across its servers: the EPP's proxy and its
// gateway (ext_proc) port take from one budget, so a burst of long prompts through either
// ingress, or both, stays within --body-budget-bytes. A request that would pass it is refused
// (503 + Retry-After) before its body is read. Thread-safe (one atomic).
#include <atomic>
#include <cstddef>

namespace llmd::http {

class BodyBudget {
 public:
  explicit BodyBudget(std::size_t capacity) : capacity_(capacity) {}  // 0 = no budget

  // Takes `n` bytes, or answers false when that would pass the capacity.
  bool try_take(std::size_t n) {
    if (capacity_ == 0) {
      return true;
    }
    std::size_t held = held_.load();
    do {
      if (n > capacity_ || held > capacity_ - n) {
        return false;
      }
    } while (!held_.compare_exchange_weak(held, held + n));
    return true;
  }
  void give_back(std::size_t n) {
    if (capacity_ != 0) {
      held_ -= n;
    }
  }
  std::size_t held() const { return held_.load(); }
  std::size_t capacity() const { return capacity_; }

 private:
  const std::size_t capacity_;
  std::atomic<std::size_t> held_{0};
};

}  // namespace llmd::http
