#pragma once
// ExtProcStream: one Envoy ext_proc stream (one HTTP request through the gateway) as the EPP
// sees it, transport-free. Messages from the gateway go in (on_message); answers go out
// through `emit`, at once or later (after the router queue and the predictions).
//
// What the gateway gets (Gateway API Inference Extension, endpoint picker protocol):
// - request: the body is collected (FULL_DUPLEX_STREAMED: the request_headers answer waits for
//   it; BUFFERED or unannounced: the headers are answered at once and the whole body comes in
//   one message), parsed as an OpenAI request, admitted and scheduled exactly as in proxy mode
//   (same SchedulingPort, AdmissionGate, RequestContext). The pick travels as the header
//   `x-gateway-destination-endpoint` and the same value under dynamic metadata
//   `envoy.lb` / `x-gateway-destination-endpoint`: "primary,fallback" (the gateway tries them
//   in order). The gateway's subset hint (`envoy.lb.subset_hint` /
//   `x-gateway-destination-endpoint-subset`) limits the candidates. A refusal is an
//   ImmediateResponse with the OpenAI error body (400, 413, 429, 503 + Retry-After).
// - response: headers and body chunks are passed on unchanged; the EPP reads them to measure
//   TTFT (first content chunk) and TPOT (end of the stream), feeds the trainer and releases the
//   pod's in-flight bookkeeping, as the proxy does. The endpoint that served the request
//   (`envoy.lb` / `x-gateway-destination-endpoint-served`) moves the bookkeeping to the
//   fallback when the primary failed. A request with `x-llmd-debug` (when allowed) gets the
//   scheduling decision as the response header `x-llmd-decision` (a header mutation of the
//   response headers, or a header of the refusal).
//
// Everything between the messages (parsing, routing, the router queue, scheduling, attempts,
// the fallback, SSE scanning, timing, feedback) is the RequestFlow's (epp/request); this class
// is only the protobuf mapping.
//
// Threading: owned by the stream's strand (its gateway connection's worker): on_message() and
// cancel() are called there, and `post` runs continuations (predictions, queue wake-ups)
// there, never on the predictor client's or the gate's thread. `emit` is called on the strand.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epp/extproc/external_processor.pb.h"
#include "epp/request/completed_request.h"
#include "epp/request/scheduling_port.h"
#include "epp/request/request_flow.h"

namespace llmd::http {
class BodyBudget;
}

namespace llmd::epp {

class AdmissionGate;

namespace extproc {

namespace pb = envoy::service::ext_proc::v3;

struct ExtProcOptions {
  std::size_t body_limit = 16 * 1024 * 1024;  // request body bytes; beyond: 413
  bool default_prediction = true;             // x-prediction-based-scheduling when absent
  bool forward_priority = true;               // soft priority -> vLLM `priority` in the body
  // Active-passive replicas: nullopt while this replica serves, else why not (every request
  // is refused 503 with it). Thread-safe, cheap; null: always serves.
  std::function<std::optional<std::string>()> not_serving;
  bool allow_debug_header = false;  // x-llmd-debug -> x-llmd-decision (response)
  // Envoy's x-gateway-destination-endpoint-subset metadata narrows the candidates (upstream's
  // --disable-endpoint-subset-filter turns it off).
  bool endpoint_subset_filter = true;
};

struct ExtProcServices {
  SchedulingPort* scheduler = nullptr;
  PodRegistry* registry = nullptr;
  CompletionSink* sink = nullptr;
  AdmissionGate* gate = nullptr;  // null: no router queue
  // The process's request-body budget (shared with the proxy): a body is counted from its
  // first chunk until it has gone back to the gateway; one that does not fit is refused 503.
  // Null: no budget.
  http::BodyBudget* body_budget = nullptr;
};

class ExtProcStream : public std::enable_shared_from_this<ExtProcStream> {
 public:
  using Emit = std::function<void(pb::ProcessingResponse)>;
  // Runs a continuation on the stream's strand (callable from any thread).
  using Post = std::function<void(std::function<void()>)>;

  ExtProcStream(const ExtProcOptions& options, const ExtProcServices& services, Emit emit,
                Post post);
  ~ExtProcStream();

  void on_message(const pb::ProcessingRequest& message);
  // A message too large for the body budget was dropped unread: the request is refused 503 +
  // Retry-After, as the proxy refuses it. False when there is no request to refuse yet.
  bool on_body_over_budget();
  // The gateway closed the stream (or it broke): a queued request leaves the queue, a request
  // whose response did not end counts as a client that went away.
  void cancel();

 private:
  enum class Phase { kRequestHeaders, kRequestBody, kScheduling, kResponse, kDone };

  void on_request_headers(const pb::ProcessingRequest& message);
  void on_request_body(const pb::HttpBody& body);
  void on_response_headers(const pb::ProcessingRequest& message);
  void on_response_body(const pb::HttpBody& body);
  void start_scheduling();
  void on_decided(const RequestFlow::Verdict& verdict);
  void refuse(int status, const std::string& detail);
  void emit_refusal(const RequestFlow::Verdict& verdict);
  void finish_response();
  // The body has gone back to the gateway (or will not): its memory and budget share go.
  void drop_body();
  std::string header(const std::string& name) const;

  ExtProcOptions options_;
  ExtProcServices services_;
  FlowOptions flow_options_;
  // The pod broke the SSE protocol mid-response: its remaining bytes are not relayed.
  bool response_broken_ = false;
  std::string broken_tail_;  // the error event that replaced the bytes it broke off at
  Emit emit_;
  Post post_;
  Phase phase_ = Phase::kRequestHeaders;
  bool hold_headers_ = false;        // FULL_DUPLEX_STREAMED request body: answer headers at the end
  bool stream_response_ = false;     // FULL_DUPLEX_STREAMED response body: echo the chunks
  bool response_body_none_ = false;  // announced: the gateway sends no response body
  bool observability_ = false;       // the gateway ignores answers
  std::vector<std::pair<std::string, std::string>> headers_;  // request headers, lower-case
  std::string path_;
  std::string method_;
  std::string body_;
  std::size_t budgeted_ = 0;           // of services_.body_budget, for body_
  std::shared_ptr<RequestFlow> flow_;  // from the request headers on
  // x-llmd-decision for a request that asked (x-llmd-debug): set on the response headers (or
  // the refusal), "" otherwise.
  std::string decision_;
  int response_status_ = 0;
};

}  // namespace extproc
}  // namespace llmd::epp
