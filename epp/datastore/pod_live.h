#pragma once
// The live part of the pool: what changes with every request and therefore is never copied
// into a pool snapshot (PoolSnapshot), but read from these objects when candidates are taken.
//
// PodLive: one per pod, for as long as the pod keeps its name, address and pool label. Pool
// snapshots and every request dispatched to the pod hold it (shared_ptr), so a request that
// outlives its pod's removal books its end on the object it booked its start on, and the
// counters always balance. PoolLearning: one per pool label, what the pool's pods learn
// together (bound coverage).
//
// Threading: every method may be called from any thread and no reader ever takes a lock.
// - In-flight counters: relaxed atomics, written by the request that dispatched (PodAttempt,
//   once each). Each counter is exact on its own; load() reads the three one after another,
//   so it may see a request's dispatch in `dispatched` but not yet its tokens.
// - Predicted TTFT: written by any scheduling cycle; the value is stored before its time, so
//   a reader sees a value at least as new as the time it judges its freshness by.
// - Residuals: observations of one pod serialize on `learn_mu_` (writers only, a few
//   arithmetic operations); readers copy the whole estimate at once (LatestValue).
// - Bound coverage: the pool's observations serialize on its `mu_` (writers only); readers
//   read the published factor (one atomic).
// - Step clock and first-token waits: see PodStepClock and PodFirstTokenWaits (readers take
//   no lock in either).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

#include "epp/datastore/bound_coverage.h"
#include "epp/datastore/latest_value.h"
#include "epp/datastore/pod_first_token_waits.h"
#include "epp/datastore/pod_residual.h"
#include "epp/datastore/pod_step_clock.h"

namespace llmd::epp {

class PoolLearning {
 public:
  // A bound of the pool's and what the pod then took (BoundCoverage::add).
  void observe_ttft(double bound_ms, double actual_ms);
  void observe_tpot(double bound_ms, double actual_ms);
  double ttft_factor() const { return ttft_factor_.load(std::memory_order_relaxed); }
  double tpot_factor() const { return tpot_factor_.load(std::memory_order_relaxed); }

 private:
  std::mutex mu_;                                            // writers only
  BoundCoverage ttft_, tpot_;                                // guarded by mu_
  std::atomic<double> ttft_factor_{1.0}, tpot_factor_{1.0};  // their factor() after each add
};

class PodLive {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  explicit PodLive(std::shared_ptr<PoolLearning> pool) : pool_(std::move(pool)) {}
  PodLive(const PodLive&) = delete;
  PodLive& operator=(const PodLive&) = delete;

  // Exact bookkeeping of one request this EPP dispatched: on_dispatch once, on_first_token at
  // most once, on_finished once, with the same token counts.
  void on_dispatch(int64_t input_tokens);
  void on_first_token(int64_t input_tokens, int64_t max_tokens);
  void on_finished(int64_t input_tokens, int64_t decode_tokens, bool first_token_seen);
  struct Load {
    int64_t dispatched = 0;
    int64_t prefill_tokens = 0;
    int64_t decode_tokens = 0;
  };
  Load load() const;

  // The latest TTFT a scheduling cycle predicted for the pod; nullopt once older than
  // `staleness`, or never predicted.
  void record_predicted_ttft(double ttft_ms, TimePoint now);
  std::optional<double> predicted_ttft(TimePoint now, std::chrono::milliseconds staleness) const;

  // What the pod measured against what the model predicted (`model_ms`: PodResidual) and
  // against the bound the SLO check used (`bound_ms`: its pool's BoundCoverage).
  void observe_ttft(double model_ms, double bound_ms, double actual_ms, TimePoint now);
  void observe_tpot(double model_ms, double bound_ms, double actual_ms, TimePoint now);
  PodResidual ttft_residual() const { return ttft_residual_.load(); }
  PodResidual tpot_residual() const { return tpot_residual_.load(); }
  const PoolLearning& pool() const { return *pool_; }

  // Fed by the streams relayed from the pod (PodStepClock is lock-free itself).
  PodStepClock& step_clock() { return step_clock_; }
  const PodStepClock& step_clock() const { return step_clock_; }
  // Its streamed requests still waiting for a first token (writers lock it, readers do not).
  PodFirstTokenWaits& first_token_waits() { return waits_; }
  const PodFirstTokenWaits& first_token_waits() const { return waits_; }

  // Whether the pod's run of consecutive failures may be open (outlier detection): lets a
  // success skip the registry's lock when there is no run to break. Written under that lock.
  bool failure_run() const { return failure_run_.load(std::memory_order_acquire); }
  void set_failure_run(bool open) { failure_run_.store(open, std::memory_order_release); }

 private:
  const std::shared_ptr<PoolLearning> pool_;
  std::atomic<int64_t> dispatched_{0}, prefill_tokens_{0}, decode_tokens_{0};
  std::atomic<double> predicted_ttft_ms_{0};
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::min();
  std::atomic<int64_t> predicted_at_{kNever};  // steady_clock ticks of the latest prediction
  std::mutex learn_mu_;  // serializes residual writers; never taken by readers
  PodResidual ttft_learning_, tpot_learning_;               // guarded by learn_mu_
  LatestValue<PodResidual> ttft_residual_, tpot_residual_;  // published after each add
  PodStepClock step_clock_;
  PodFirstTokenWaits waits_;
  std::atomic<bool> failure_run_{false};
};

}  // namespace llmd::epp
