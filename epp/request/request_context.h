#pragma once
// RequestContext: the one owner of a client request's bookkeeping, from admission to its end;
// PodAttempt: the RAII ticket of one dispatch to a pod inside it.
//
// Everything the EPP counts about a request is taken and given back here, exactly once, on
// every path (success, failure, retry, client gone, exception): the router queue's in-transit
// slot (AdmissionGate), the pod's in-flight requests and tokens (PodRegistry), and the
// completion record that feeds metrics, training feedback, the prefix index and the routing
// rules' statistics (CompletionSink). The proxy drives it with the real clock; the
// virtual-time cluster benchmark drives the same class with its virtual clock, so the
// benchmark runs the bookkeeping that ships.
//
// Threading: owned by one request's RequestFlow (on its strand or executor, or the
// simulator's event loop); not thread-safe itself. The services it calls are thread-safe.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "epp/datastore/pod_first_token_waits.h"
#include "epp/interface/endpoint.h"
#include "epp/interface/request.h"
#include "epp/request/completed_request.h"
#include "epp/request/scheduling_port.h"
#include "epp/request/admission_ticket.h"

namespace llmd::epp {

class PodRegistry;
class PodLive;

struct LifecycleServices {
  PodRegistry* registry = nullptr;  // in-flight bookkeeping of pool pods (null: none)
  CompletionSink* sink = nullptr;   // completions and the EPP's own answers (null: none)
  AdmissionGate* gate = nullptr;    // router queue (null: none)
};

// What a response taught about its request, handed to its attempt once, when the attempt ends
// (so the completion record is written in one place and is read-only afterwards).
struct ResponseFacts {
  std::optional<int64_t> completion_tokens;  // usage, or a stream's content chunks counted
  std::optional<int64_t> cached_tokens;
  std::optional<int64_t> prompt_tokens;   // usage's prompt_tokens
  std::optional<int64_t> response_bytes;  // the response ran to its end: its body's bytes
  std::string continuation_prompt;        // the prompt the pod now holds ("" = unknown)
  // A non-streamed answer: its first token arrived with the whole body, so TTFT = end-to-end.
  bool ttft_is_e2e = false;
  // Times measured by a transport that knows them exactly (the simulator's engine, in double
  // ms, where the steady clock would round to nanoseconds); otherwise the attempt's own clock
  // readings (dispatch -> first token, dispatch -> end) are the times.
  std::optional<double> exact_ttft_ms;
  std::optional<double> exact_e2e_ms;
};

class PodAttempt;

class RequestContext {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  RequestContext(const LifecycleServices& services, TimePoint received);
  // Gives back an admission slot that no dispatch took over (AdmissionTicket's destructor).
  ~RequestContext() = default;
  RequestContext(const RequestContext&) = delete;
  RequestContext& operator=(const RequestContext&) = delete;

  // The request's place in the router queue, then its in-transit slot: held until the first
  // dispatch shows in the pod bookkeeping, or given back when the request ends without one.
  AdmissionTicket& admission() { return admission_; }
  // The EPP answered the client itself (400, 413, 429, 503, or 502 after failed attempts).
  void rejected(const std::string& model, int status);

  // Attempt `number` (1-based) of `request` on `pod` (a pool pod, or an upstream URL target
  // when `route.upstream` is set), dispatched at `now`.
  PodAttempt dispatch(const SchedulingRequest& request, const Endpoint& pod, const Route& route,
                      const std::string& target_model, int64_t max_tokens, int number,
                      TimePoint now);

  TimePoint received() const { return received_; }
  const LifecycleServices& services() const { return services_; }

 private:
  LifecycleServices services_;
  TimePoint received_;
  AdmissionTicket admission_;
};

class PodAttempt {
 public:
  using TimePoint = RequestContext::TimePoint;

  PodAttempt(PodAttempt&& other) noexcept;
  PodAttempt& operator=(PodAttempt&&) = delete;
  PodAttempt(const PodAttempt&) = delete;
  PodAttempt& operator=(const PodAttempt&) = delete;
  // An attempt nobody ended lost its client (e.g. the coroutine was destroyed): 499.
  ~PodAttempt();

  // The completion record: what the sinks were (or will be) told. Written only by this
  // attempt's own events; complete once ended().
  const CompletedRequest& record() const { return done_; }
  bool is_pod() const { return !done_.upstream_url; }
  bool ended() const { return ended_; }
  TimePoint dispatched() const { return dispatched_; }

  // The first content token reached the EPP (streaming): TTFT sample, prefill -> decode.
  void first_token(TimePoint now);
  // The relayed stream has carried `content_chunks` chunks with generated content so far
  // (vLLM streams one token per chunk): the first is the first token, each later one ends one
  // forward pass of the pod (its PodStepClock).
  void streamed(int64_t content_chunks, TimePoint now);
  // The pod answered in full with `status` (a success below 400).
  void answered(int status, TimePoint now, ResponseFacts facts = {});
  // The pod failed with `status`: refused, timed out, 5xx, or broke off mid-response. It is
  // excluded for the cooldown. `before_response`: nothing reached the client (retryable).
  void pod_failed(int status, bool before_response, TimePoint now, ResponseFacts facts = {});
  // The client went away while the response was being relayed.
  void client_gone(TimePoint now);

 private:
  friend class RequestContext;
  PodAttempt(RequestContext& owner, const SchedulingRequest& request, const Endpoint& pod,
             const Route& route, const std::string& target_model, int64_t max_tokens, int number,
             TimePoint now);
  void end(bool success, int status, TimePoint now, ResponseFacts&& facts);
  void stop_waiting();

  const LifecycleServices* services_;
  std::string pool_;
  CompletedRequest done_;
  int64_t uncached_tokens_ = 0;  // what the request adds to the pod's prefill queue
  int64_t max_tokens_ = 0;
  TimePoint dispatched_;
  // The pod's live bookkeeping, held from dispatch to end so the counts balance even when the
  // pod leaves the pool meanwhile. Null: not a pool pod, or no registry.
  std::shared_ptr<PodLive> live_;
  // While a streamed request waits for its first token with a predicted bound: its entry in
  // live_'s PodFirstTokenWaits (removed exactly once, at the first token or the end).
  std::optional<PodFirstTokenWaits::Handle> wait_;
  std::optional<TimePoint> last_token_;  // of this stream
  int64_t content_chunks_ = 0;           // seen so far (streamed)
  bool ended_ = false;
};

}  // namespace llmd::epp
