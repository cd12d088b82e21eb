#pragma once
// A capacity that threads take from and give back to (descriptors, request-body bytes): what is
// held never passes the capacity. Thread-safe (one atomic).
#include <atomic>
#include <cstddef>

namespace llmd::http {

class Budget {
 public:
  explicit Budget(std::size_t capacity) : capacity_(capacity) {}

  // Takes `n`, or answers false when that would pass the capacity.
  bool try_take(std::size_t n) {
    std::size_t held = held_.load();
    do {
      if (n > capacity_ || held > capacity_ - n) {
        return false;
      }
    } while (!held_.compare_exchange_weak(held, held + n));
    return true;
  }
  void give_back(std::size_t n) { held_.fetch_sub(n); }
  std::size_t held() const { return held_.load(); }
  std::size_t capacity() const { return capacity_; }

 private:
  const std::size_t capacity_;
  std::atomic<std::size_t> held_{0};
};

}  // namespace llmd::http
