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
// Threading: owned by one request (the proxy's coroutine on its strand, or the simulator's
// event loop); not thread-safe itself. The services it calls are thread-safe.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "epp/interface/endpoint.h"
#include "epp/interface/request.h"
#include "epp/proxy/proxy_types.h"

namespace llmd::epp {

class PodRegistry;
class PodStepClock;
class AdmissionGate;

struct LifecycleServices {
  PodRegistry* registry = nullptr;  // in-flight bookkeeping of pool pods (null: none)
  CompletionSink* sink = nullptr;   // completions and the EPP's own answers (null: none)
  AdmissionGate* gate = nullptr;    // router queue (null: none)
};

class PodAttempt;

class RequestContext {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  RequestContext(const LifecycleServices& services, TimePoint received);
  // Gives back an admission slot that no dispatch took over.
  ~RequestContext();
  RequestContext(const RequestContext&) = delete;
  RequestContext& operator=(const RequestContext&) = delete;

  // The router queue admitted the request into `pool`: its in-transit slot is held until the
  // first dispatch shows in the pod bookkeeping, or until the request ends without one.
  void admitted(const std::string& pool);
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
  void release_admission();

  LifecycleServices services_;
  TimePoint received_;
  std::optional<std::string> admitted_pool_;  // set while the gate's slot is held
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

  // What the transport learns on the way (tokens, cached tokens, continuation prompt, TTFT of a
  // non-streamed body); read by the sinks when the attempt ends.
  CompletedRequest& record() { return done_; }
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
  void answered(int status, TimePoint now);
  // The pod failed with `status`: refused, timed out, 5xx, or broke off mid-response. It is
  // excluded for the cooldown. `before_response`: nothing reached the client (retryable).
  void pod_failed(int status, bool before_response, TimePoint now);
  // The client went away while the response was being relayed.
  void client_gone(TimePoint now);

 private:
  friend class RequestContext;
  PodAttempt(RequestContext& owner, const SchedulingRequest& request, const Endpoint& pod,
             const Route& route, const std::string& target_model, int64_t max_tokens,
             int number, TimePoint now);
  void end(bool success, int status, TimePoint now);

  const LifecycleServices* services_;
  std::string pool_;
  CompletedRequest done_;
  int64_t uncached_tokens_ = 0;  // what the request adds to the pod's prefill queue
  int64_t max_tokens_ = 0;
  TimePoint dispatched_;
  std::shared_ptr<PodStepClock> step_clock_;  // null: not a pool pod, or no registry
  std::optional<TimePoint> last_token_;       // of this stream
  int64_t content_chunks_ = 0;                // seen so far (streamed)
  bool ended_ = false;
};

}  // namespace llmd::epp
