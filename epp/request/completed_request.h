#pragma once
// The record of one dispatch to a pod (what the trainer learns from, what the metrics count) and
// the sink each ingress reports dispatches, first tokens, completions and its own refusals to.
// Sinks are called on the request's thread (a proxy strand, the ext_proc stream, the
// simulator's loop) and must not block.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "epp/interface/endpoint.h"
#include "epp/interface/request.h"

namespace llmd::epp {

struct CompletedRequest {
  SchedulingRequest request;
  Endpoint pod;               // as seen at dispatch (features of the training sample)
  std::string target_model;   // the model the pod was asked for (after override_params)
  std::string rule_id;        // model-level routing rule ("" = none)
  std::string target;         // that rule's target
  bool upstream_url = false;  // forwarded to an upstream URL (not a pool pod)
  bool success = false;
  bool client_aborted = false;
  // The attempt failed before any byte reached the client: the proxy retries on another pod or
  // answers itself (CompletionSink::on_rejected), so this status is not what the client got.
  bool before_response = false;
  int status = 0;
  double ttft_ms = 0;  // from dispatch; streaming: first content chunk; non-streaming: end-to-end
  // Arrival at the EPP -> dispatch to the pod (router queue, scheduling, earlier attempts).
  // Clients see ttft_ms plus this; the pod's latency (what the models learn) is ttft_ms alone.
  double dispatch_delay_ms = 0;
  double e2e_ms = 0;
  bool first_token = false;  // streaming: a content chunk arrived (ttft_ms is measured)
  // Usage's completion_tokens, or (a stream without usage) the content chunks counted.
  std::optional<int64_t> completion_tokens;
  std::optional<int64_t> cached_tokens;
  std::optional<int64_t> prompt_tokens;  // usage's prompt_tokens (the pod's own count)
  // Bytes of the response body relayed to the client, when the response ran to its end.
  std::optional<int64_t> response_bytes;
  int64_t prompt_chars = 0;  // characters of the request's prompt text (the text is not kept)
  // The prompt text the pod's KV cache now holds: the request's prompt text followed by the
  // generated answer, in the form the conversation's next turn will send it ("" = unknown).
  // The prefix index learns it so the next turn matches the pod that holds the answer.
  std::string continuation_prompt;
  int attempts = 1;

  // A stream's time per output token after the first: (e2e - TTFT) / (tokens - 1), for a
  // streamed request with a first token and more than one token that took longer than its TTFT.
  std::optional<double> measured_tpot_ms() const {
    if (!request.streaming || !first_token || !completion_tokens || *completion_tokens <= 1 ||
        !(e2e_ms > ttft_ms)) {
      return std::nullopt;
    }
    return (e2e_ms - ttft_ms) / static_cast<double>(*completion_tokens - 1);
  }
  // The TTFT this request would have had arriving at an average moment of its pod's step: the
  // measured TTFT minus the step-phase delay the prediction added (LatencyPredictionInfo::
  // ttft_phase_ms). What the model, which sees no clock, is trained on and compared with.
  double phase_neutral_ttft_ms() const {
    const double phase = pod.latency ? pod.latency->ttft_phase_ms : 0.0;
    return std::max(0.0, ttft_ms - phase);
  }
};

// Told once per dispatch to a pod (each attempt: a retry is a second dispatch) when it is sent
// (`request`, `pod`, `target_model`, `attempts` and `dispatch_delay_ms` are set), once when its
// first token arrives (streaming responses only, before on_completed; `ttft_ms` and
// `first_token` are set), and exactly once per dispatch on success, failure or client abort.
class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  virtual void on_dispatched(const CompletedRequest&) {}
  virtual void on_first_token(const CompletedRequest&) {}
  virtual void on_completed(const CompletedRequest& done) = 0;
  // The EPP answered a client itself with `status` (400, 413, 429, 503, or 502 when no pod
  // answered): once per such answer, `model` empty when the body was not read.
  virtual void on_rejected(const std::string& /*model*/, int /*status*/) {}
};

}  // namespace llmd::epp
