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
// Threading: written by the threads that own the pod's requests (dispatch, first token, end)
// and read by scheduling threads; a small mutex of its own guards the set, so the pod table's
// lock is not taken on the stream path.
#include <chrono>
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
    return due_.insert(due);
  }
  // Its first token arrived, or it ended without one. Each handle is removed exactly once.
  void remove(Handle h) {
    std::lock_guard lock(mu_);
    due_.erase(h);
  }
  // How long past its bound the most overdue waiting request is (0 when none is overdue).
  double late_ms(TimePoint now) const {
    std::lock_guard lock(mu_);
    if (due_.empty() || *due_.begin() >= now) {
      return 0;
    }
    return std::chrono::duration<double, std::milli>(now - *due_.begin()).count();
  }
  std::size_t waiting() const {
    std::lock_guard lock(mu_);
    return due_.size();
  }

 private:
  mutable std::mutex mu_;
  std::multiset<TimePoint> due_;
};

}  // namespace llmd::epp
