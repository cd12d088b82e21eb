#pragma once
// The file descriptors a process may hand to accepted connections: its soft RLIMIT_NOFILE less a
// reserve for what it opens itself (upstream connections, scrapes, feedback, model sync, files,
// the event loops' own descriptors). Every server of the process takes from the one budget, so
// no number of idle clients can leave the process unable to open what it needs; a listener at
// the limit stops accepting (connections wait in the kernel's backlog) until one closes.
// Thread-safe (one atomic).
#include <atomic>
#include <cstddef>

namespace llmd::http {

class DescriptorBudget {
 public:
  // The process's budget, sized from its soft RLIMIT_NOFILE when first used.
  static DescriptorBudget& process();
  // What a process whose descriptor limit is `limit` may give to connections.
  static std::size_t capacity_for(std::size_t limit);

  explicit DescriptorBudget(std::size_t capacity) : capacity_(capacity) {}

  // Takes `n` descriptors, or answers false when that would pass the capacity.
  bool try_take(std::size_t n);
  void give_back(std::size_t n) { held_.fetch_sub(n); }
  std::size_t held() const { return held_.load(); }
  std::size_t capacity() const { return capacity_; }

 private:
  const std::size_t capacity_;
  std::atomic<std::size_t> held_{0};
};

}  // namespace llmd::http
