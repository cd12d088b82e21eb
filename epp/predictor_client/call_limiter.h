#pragma once
// CallLimiter: how many prediction calls (callers) the client accepts at once (epp.md section 3).
//
// Why: past saturation every accepted call waits behind the ones before it. The predictor
// client's rate-based shedding (PredictorClient::should_shed) only sees the replicas' row rate;
// when the bottleneck is elsewhere (the EPP's own CPU encoding rows and parsing answers, the
// network, a replica on a busy node) it keeps accepting, the queue grows to one deadline's
// worth of calls, and every call in it misses: goodput falls to nearly nothing (the cliff
// prediction_scalability showed at 1.5x saturation). A cap on calls in flight bounds the queue
// whatever the bottleneck is (Little's law: throughput = calls in flight / latency), so accepted
// calls keep finishing in time and only the excess falls back to the composite scorer.
//
// The cap follows the outcome of the calls it admitted (AIMD, as TCP's congestion window):
// - a call answered within `fast_share` of its deadline budget widens it by 1/limit (about +1
//   per limit's worth of answers), but only while the cap is in use (at least half of it was
//   occupied), so an idle period cannot inflate it beyond what the next burst can bear;
// - a call that misses its deadline, or is answered later than `slow_share` of its budget,
//   narrows it by `backoff`, at most once per `decrease_spacing` (one burst of misses is one
//   congestion signal, not dozens);
// - a cancelled call (the caller gave up for its own reasons) only frees its place.
// Pure: no threads, no I/O; time is passed in. Not thread-safe: PredictorClient calls it under
// its mutex.
#include <chrono>
#include <cstddef>

namespace llmd::epp::predictor_client {

class CallLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  struct Config {
    double initial_limit = 64;
    double min_limit = 4;
    double max_limit = 4096;
    double backoff = 0.8;  // multiplicative decrease, in (0, 1)
    // Answered within this share of the budget: widen; after `slow_share`: narrow. Low shares
    // on purpose: a scheduling call that waits 25 of its 50 ms still adds 25 ms to the
    // request's TTFT, where the composite fallback adds none.
    double fast_share = 0.1;
    double slow_share = 0.25;
    Clock::duration decrease_spacing = std::chrono::milliseconds(10);
  };

  CallLimiter() : CallLimiter(Config{}) {}
  explicit CallLimiter(Config config);

  // True and counts the call when there is room; false (nothing counted) when the cap is full.
  bool try_admit();
  // An admitted call was answered `latency` after it was admitted, with `budget` (admission to
  // deadline) to spare at most.
  void on_answer(Clock::duration latency, Clock::duration budget, Clock::time_point now);
  // An admitted call ended without an answer because of the load: its deadline passed, or the
  // client shed it after admission.
  void on_miss(Clock::time_point now);
  // An admitted call ended for a reason that says nothing about the load (failure, shutdown).
  void on_cancel();

  double limit() const { return limit_; }
  std::size_t outstanding() const { return outstanding_; }

 private:
  void release();
  void decrease(Clock::time_point now);

  Config config_;
  double limit_;
  std::size_t outstanding_ = 0;
  Clock::time_point last_decrease_{};
  bool decreased_ = false;
};

}  // namespace llmd::epp::predictor_client
