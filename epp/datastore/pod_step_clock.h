#pragma once
// Records when a pod's forward passes end and how long they take (StepTiming), from the tokens
// of the streams the EPP relays: each streamed token of a decoding request ends one step of
// its pod, and the gap between a stream's consecutive tokens is one step.
//
// Threading: written by the threads relaying the pod's streams (atomic stores, no lock on the
// data path), read by scheduling threads. A lost EWMA update under a race is harmless.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>

#include "epp/interface/step_timing.h"

namespace llmd::epp {

class PodStepClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `count` tokens of one stream arrived at `now`, `gap_ms` after that stream's previous token
  // (nullopt for its first token: that gap is its TTFT, not a step).
  void on_tokens(TimePoint now, std::optional<double> gap_ms, int64_t count) {
    const int64_t ns = now.time_since_epoch().count();
    // Streams of one step arrive within a fraction of a millisecond, in any order.
    int64_t prev = last_token_.load(std::memory_order_relaxed);
    while (ns > prev && !last_token_.compare_exchange_weak(prev, ns, std::memory_order_relaxed)) {
    }
    if (!gap_ms || count <= 0 || !(*gap_ms > 0) || !std::isfinite(*gap_ms)) {
      return;
    }
    // A read that carried several tokens (the proxy was late) spans as many steps.
    const double step = *gap_ms / static_cast<double>(count);
    const double old = step_ms_.load(std::memory_order_relaxed);
    step_ms_.store(old > 0 ? old + kSmoothing * (step - old) : step, std::memory_order_relaxed);
  }

  // nullopt until a step was measured.
  std::optional<StepTiming> timing() const {
    const double step = step_ms_.load(std::memory_order_relaxed);
    const int64_t last = last_token_.load(std::memory_order_relaxed);
    if (!(step > 0) || last == 0) {
      return std::nullopt;
    }
    return StepTiming{step, TimePoint(TimePoint::duration(last))};
  }

 private:
  static constexpr double kSmoothing = 0.3;  // weight of the newest step in the EWMA
  std::atomic<int64_t> last_token_{0};       // steady_clock ticks of the latest token; 0 = none
  std::atomic<double> step_ms_{0};           // 0 = not measured yet
};

}  // namespace llmd::epp
