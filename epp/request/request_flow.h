#pragma once
// RequestFlow: one request through the EPP, from its parsed headers and body to the end of its
// response, whatever carries its bytes. It takes the configuration generation, parses the
// OpenAI body, routes, waits in the router queue (AdmissionTicket), schedules, decides the
// attempts and the one retry, scans the response (SSE first token and chunks, usage), times
// TTFT/TPOT and hands the finished record to the sinks (metrics, training feedback, prefix
// index, routing statistics) through its RequestContext.
//
// The transports only move bytes: the proxy (epp/proxy) keeps the sockets, ext_proc
// (epp/extproc) the protobuf mapping, and the virtual-time benchmark (bench/cluster) drives
// this class with its virtual clock.
//
// Usage: create(); start*() once; `decided` runs exactly once (refusal, client gone, or the
// pods to try). Then, while next_pod() is not null: dispatch(), response_bytes()/tokens(), and
// one of response_ended() / pod_failed() / client_gone(). No pod left: exhausted().
//
// Threading: owned by one strand or executor; every method is called there. Continuations
// from the scheduler and the router queue come back through `post` (never inline on the
// predictor client's or the gate's thread), and `decided` runs on that executor too (or
// inline inside start*() when nothing waits). Callbacks hold a shared_ptr to the flow, so it
// lives until the scheduler and gate are done with it.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epp/interface/rng.h"
#include "epp/request/openai_request.h"
#include "epp/request/completed_request.h"
#include "epp/request/scheduling_port.h"
#include "epp/request/sse_scanner.h"
#include "epp/request/request_context.h"

namespace llmd::epp {

struct FlowOptions {
  bool default_prediction = true;   // x-prediction-based-scheduling when absent
  bool forward_priority = true;     // soft priority -> vLLM `priority` (see upstream_body)
  bool allow_debug_header = false;  // x-llmd-debug -> the x-llmd-decision value
  // A model-level rule may target an upstream URL (proxy mode). Gateway mode cannot reach one
  // (the gateway sends to the pool's endpoints only): such a request is refused 503.
  bool url_targets = true;
  // Bytes of a non-streamed response kept to read its usage.
  std::size_t response_body_limit = 16 * 1024 * 1024;
};

struct FlowServices {
  SchedulingPort* scheduler = nullptr;  // never null
  PodRegistry* registry = nullptr;      // in-flight bookkeeping (null: none)
  CompletionSink* sink = nullptr;       // completions and refusals (null: none)
  AdmissionGate* gate = nullptr;        // router queue (null: none)
  // Scheduling randomness (null: the flow's own, freshly seeded). The simulator shares one
  // seeded Rng so that a run repeats; it must outlive the flow.
  Rng* rng = nullptr;
};

class RequestFlow : public std::enable_shared_from_this<RequestFlow> {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Clock = std::function<TimePoint()>;
  using Post = std::function<void(std::function<void()>)>;  // onto the owner's executor

  // The decision: dispatch (status 200, the pods are ranked()), or the EPP answers itself
  // (already reported to the sink), or 499 (the client left first; nobody is answered).
  struct Verdict {
    int status = 200;
    std::string detail;    // refusal message
    std::string decision;  // x-llmd-decision value ("" = not asked for)
  };
  using Decided = std::function<void(const Verdict&)>;

  // `clock` defaults to the steady clock; the flow reads it for every event it times.
  static std::shared_ptr<RequestFlow> create(const FlowOptions& options,
                                             const FlowServices& services, Post post,
                                             Clock clock = {});
  ~RequestFlow();
  RequestFlow(const RequestFlow&) = delete;
  RequestFlow& operator=(const RequestFlow&) = delete;

  // Gateway mode: the gateway's subset hint (ip:port list) limits the candidates. Before start.
  void set_endpoint_subset(std::vector<std::string> subset);

  // An OpenAI inference request (`path` /v1/completions or /v1/chat/completions): parse (400),
  // route, queue, schedule.
  void start(std::string_view path, std::string_view body, const InboundHeaders& headers,
             Decided decided);
  // A request in scheduling form already (the simulator sends no HTTP body), to the route's
  // default pool.
  void start_scheduled(SchedulingRequest request, int64_t max_tokens, Decided decided);
  // Not an inference request (gateway mode: anything else on the route): any ready pod, no
  // queue and no bookkeeping.
  void start_passthrough(const InboundHeaders& headers, Decided decided);

  // The EPP answers the client itself for a reason of the transport's (413, draining, standby):
  // reported once to the sink. Returns the verdict to send.
  Verdict refuse(int status, std::string detail);

  // After a 200 verdict.
  const std::vector<Endpoint>& ranked() const { return ranked_; }
  const Route& route() const { return route_; }
  // What the pod gets: nullopt = the client's bytes unchanged.
  const std::optional<std::string>& forwarded_body() const { return forwarded_body_; }
  const std::string& request_id() const { return parsed_.request.request_id; }
  bool streaming() const { return parsed_.request.streaming; }
  bool predictions_used() const { return predictions_used_; }

  // The retry decision: the pod of the next attempt, or null when none is due (the first goes
  // to ranked()[0]; after a failure before any response byte, one retry on ranked()[1]).
  const Endpoint* next_pod() const;
  // The transport sends the request to next_pod() now (a passthrough request keeps no
  // bookkeeping and only counts the attempt).
  void dispatch();
  // The attempt in progress, or the last one (null before the first dispatch, passthrough).
  const PodAttempt* attempt() const { return attempt_ ? &*attempt_ : nullptr; }
  int attempts() const { return attempts_; }
  // Gateway mode: the gateway reports which endpoint served. The fallback means the primary
  // failed before answering and the gateway retried there itself: the bookkeeping follows.
  void served_by(const std::string& address);

  // Response bytes as they pass (SSE scanned for the first token and chunks; a non-streamed
  // body kept, bounded, for its usage). False: the pod broke the protocol (an SSE line beyond
  // SseScanner::kMaxLineBytes); the transport ends the response as a mid-stream failure.
  bool response_bytes(std::string_view bytes);
  // A transport that sees tokens, not bytes (the simulator): `content_chunks` so far, the
  // last of them produced `at` (an event time, which may precede the clock's reading).
  void tokens(int64_t content_chunks, TimePoint at);
  // The response ran to its end with `status` (5xx: the pod failed after the response began).
  void response_ended(int status);
  // The same at `at`, with what the transport measured itself (the simulator's engine).
  void response_ended(int status, ResponseFacts facts, TimePoint at);
  // The pod failed: `before_response` = nothing reached the client (next_pod() then retries).
  void pod_failed(int status, bool before_response);
  // The client (or the gateway's stream) went away, in any phase: a queued request leaves the
  // queue, a pending decision becomes 499, an attempt in progress ends as 499.
  void client_gone();
  // No pod answered before the response began: the EPP answers 502 (reported).
  Verdict exhausted();

 private:
  RequestFlow(const FlowOptions& options, const FlowServices& services, Post post, Clock clock);

  void begin(Decided decided);
  void route_and_admit();
  void enter_queue(double service_ms);
  void pick();
  void on_picked(PickResult pick);
  void decide(Verdict verdict);
  void reject(int status, const std::string& detail);
  void end_attempt(int status, ResponseFacts facts, TimePoint at);
  TimePoint now() const { return clock_(); }

  FlowOptions options_;
  FlowServices services_;
  Post post_;
  Clock clock_;
  RequestContext context_;
  Rng own_rng_;
  Rng& rng_;
  Decided decided_;  // set from start*() until the decision
  bool inference_ = false;
  bool gone_ = false;  // the client left
  bool predictions_used_ = false;
  SchedulingGenerationPtr config_;
  ParsedRequest parsed_;
  Route route_;
  std::vector<Endpoint> ranked_;
  std::optional<std::string> forwarded_body_;
  std::string target_model_;
  int attempts_ = 0;
  bool retry_due_ = false;  // the last attempt failed before the response began
  std::optional<PodAttempt> attempt_;
  SseScanner scanner_;
  std::string whole_;           // non-streamed response body (bounded)
  int64_t response_bytes_ = 0;  // of the current attempt's response body, as relayed
};

}  // namespace llmd::epp
