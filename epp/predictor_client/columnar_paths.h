#pragma once
// ColumnarPaths: which bulk path each predictor replica gets (README "Wire").
// - A replica starts on /predict/bulk/columnar (ours). One that answers it 404/405 (a reference
//   predictor, which has only /predict/bulk/strict) gets the strict path from then on.
// - The compact exchange comes back: a strict replica gets one columnar batch again once every
//   `retry_after` (a rolling upgrade to our predictor behind the same URL), and is reset to
//   columnar when it is re-admitted after being unhealthy (it may be another process now). A
//   retry that finds the reference predictor again costs one round trip: the 404 makes the
//   batch be resent on the strict path at once, within its deadline.
// - A columnar batch answered 200 puts a strict replica back on the columnar path.
// Pure: no threads, no I/O; the time is passed in. Not thread-safe: the owner serialises all
// calls (PredictorClient holds its mutex around every call).
#include <chrono>
#include <cstddef>
#include <vector>

namespace llmd::epp::predictor_client {

class ColumnarPaths {
 public:
  using Clock = std::chrono::steady_clock;

  ColumnarPaths(std::size_t replicas, Clock::duration retry_after)
      : retry_after_(retry_after), replicas_(replicas) {}

  // Whether a batch to `replica` sent now goes to the columnar path. On a strict replica whose
  // retry is due, true once; the next retry is then `retry_after` away whatever it finds.
  bool use_columnar(std::size_t replica, Clock::time_point now) {
    State& s = replicas_[replica];
    if (s.columnar) {
      return true;
    }
    if (now < s.next_retry) {
      return false;
    }
    s.next_retry = now + retry_after_;
    return true;
  }

  // The replica answered the columnar path 404/405. True when this switched it to strict
  // (false: it was strict already, e.g. a retry that found the reference predictor again).
  bool not_served(std::size_t replica, Clock::time_point now) {
    State& s = replicas_[replica];
    const bool changed = s.columnar;
    if (changed) {
      s.columnar = false;
      s.next_retry = now + retry_after_;
    }
    return changed;
  }

  // A columnar batch to the replica was answered 200. True when this switched it back from
  // strict (a retry found our predictor).
  bool served(std::size_t replica) {
    State& s = replicas_[replica];
    const bool changed = !s.columnar;
    s.columnar = true;
    return changed;
  }

  // The replica was re-admitted after being unhealthy: columnar again, as at start. True when
  // it was strict.
  bool reset(std::size_t replica) { return served(replica); }

  bool columnar(std::size_t replica) const { return replicas_[replica].columnar; }

 private:
  struct State {
    bool columnar = true;
    Clock::time_point next_retry{};  // while strict: the earliest columnar retry
  };
  const Clock::duration retry_after_;
  std::vector<State> replicas_;
};

}  // namespace llmd::epp::predictor_client
