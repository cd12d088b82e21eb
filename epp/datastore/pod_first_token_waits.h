#pragma once
// The requests a pod holds that have not produced their first token, each with the moment its
// predicted TTFT bound ran out: how late the pod is running right now, before any of them
// answers. A completed-request residual (PodResidual) reacts only after first tokens arrive and
// needs many of them to be significant; in the first burst above the load a model was trained
// on, the queue builds for seconds before that. A request still waiting past its bound is a
// censored observation: its TTFT is at least its elapsed time. Requests are prefilled in
// arrival order, so a new request queues behind the most overdue one and starts at least as
// late as that one's bound was missed.
//
// Threading: written by the threads that own the pod's requests (dispatch, first token, end),
// which serialize on a small mutex of its own guarding the set; read by scheduling threads
// without it: each write publishes the earliest due time in one atomic. Owned by the pod's
// PodLive.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <set>

namespace llmd::epp {

class PodFirstTokenWaits {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Handle = std::multiset<TimePoint>::iterator;

  // A request was dispatched; its predicted TTFT bound ends at `due`.
  Handle add(TimePoint due) {
    std::lock_guard lock(mu_);
    const Handle h = due_.insert(due);
    publish_earliest();
    return h;
  }
  // Its first token arrived, or it ended without one. Each handle is removed exactly once.
  void remove(Handle h) {
    std::lock_guard lock(mu_);
    due_.erase(h);
    publish_earliest();
  }
  // How long past its bound the most overdue waiting request is (0 when none is overdue).
  double late_ms(TimePoint now) const {
    const int64_t earliest = earliest_.load(std::memory_order_acquire);
    const TimePoint due{TimePoint::duration(earliest)};
    if (earliest == kNone || due >= now) {
      return 0;
    }
    return std::chrono::duration<double, std::milli>(now - due).count();
  }
  std::size_t waiting() const {
    std::lock_guard lock(mu_);
    return due_.size();
  }

 private:
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  void publish_earliest() {  // mu_ held
    earliest_.store(due_.empty() ? kNone : due_.begin()->time_since_epoch().count(),
                    std::memory_order_release);
  }

  mutable std::mutex mu_;                 // writers (and waiting()) only
  std::multiset<TimePoint> due_;          // guarded by mu_
  std::atomic<int64_t> earliest_{kNone};  // due_.begin() in steady_clock ticks; kNone if empty
};

}  // namespace llmd::epp
