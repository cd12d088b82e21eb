#pragma once
// A pod's forward-pass timing as the EPP sees it in the token streams it relays, and what it
// means for a request sent there now.
//
// Why: a request that reaches a busy vLLM pod waits for the forward pass in progress to end
// before its prefill starts, so at low load its TTFT carries a wait anywhere between zero and
// one step (5-30 ms on real GPUs). The latency model sees no clock and predicts the average
// over that phase, which is most of its error below saturation; a router that knows a pod's
// step is about to end can send the request there. Every streamed token of a decoding request
// marks the end of one step of its pod, so the last token's time and the gap between a
// stream's consecutive tokens give the phase without asking the pod anything.
#include <algorithm>
#include <chrono>
#include <optional>

namespace llmd::epp {

struct StepTiming {
  double step_ms = 0;  // typical step duration (> 0)
  std::chrono::steady_clock::time_point last_step_end{};
};

// A step that has run this much longer than the typical one is not a typical step (a long
// prefill chunk, a grown batch): its end is unknown, not imminent.
inline constexpr double kStepOverrun = 1.1;

// How much later (> 0) or sooner (< 0) than on average a request arriving at `now` starts on
// the pod: the rest of the step in progress, minus the half step an arrival at a random moment
// waits on average; in [-step/2, step/2]. nullopt when the step in progress has run past
// kStepOverrun typical steps (scored "ending now", such pods drew the most requests and the
// longest waits: 100 identical pods, TTFT p95 +0.5 %), or when the pod went idle or no stream
// we relay runs there any more: the phase is unknown.
inline std::optional<double> step_arrival_delay_ms(const StepTiming& t,
                                                   std::chrono::steady_clock::time_point now) {
  if (!(t.step_ms > 0)) {
    return std::nullopt;
  }
  const double elapsed =
      std::max(0.0, std::chrono::duration<double, std::milli>(now - t.last_step_end).count());
  if (elapsed > kStepOverrun * t.step_ms) {
    return std::nullopt;
  }
  return std::max(0.0, t.step_ms - elapsed) - 0.5 * t.step_ms;
}

}  // namespace llmd::epp
