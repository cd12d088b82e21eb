#pragma once
// The answers both ingresses (the HTTP proxy and the ext_proc gateway port) give the same way:
// which requests are inference requests, the EPP's own refusal (the OpenAI error object with
// Retry-After and the request's identity), the headers a pod's response gains, and the standby
// check. Each transport only maps these onto its wire form (Beast fields, ext_proc header
// mutations). Pure functions: no state, callable from any thread.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epp/request/request_flow.h"

namespace llmd::epp {

// nginx's code for a client that went away before the answer: counted, never sent.
inline constexpr int kClientClosedRequest = 499;

// The decision explanation response header (asked for with x-llmd-debug), and its bounds.
inline constexpr char kDecisionHeader[] = "x-llmd-decision";
inline constexpr std::size_t kDecisionHeaderMaxCandidates = 10;
inline constexpr std::size_t kDecisionHeaderMaxBytes = 2048;
// The pod a response came from (as GIE's EPP names it to Envoy).
inline constexpr char kDestinationHeader[] = "x-gateway-destination-endpoint";
inline constexpr char kRequestIdHeader[] = "x-request-id";

// Names as HTTP/1 writes them; an HTTP/2 transport lowercases them (RFC 9113 section 8.2.1).
using HeaderField = std::pair<std::string, std::string>;

// The two paths the EPP schedules (each only as POST).
bool is_inference_path(std::string_view path);
bool is_inference_request(std::string_view method, std::string_view path);

// The EPP's own answer to a client: the OpenAI error object (`code` overrides the one derived
// from the status), content-type JSON, Retry-After: 1 on 429/503 (without it SDKs retry at
// once; a second is the scale of a queue turning over), the request id and the decision when
// known ("" = leave out).
struct RefusalAnswer {
  int status = 503;
  std::string body;
  std::vector<HeaderField> headers;
};
RefusalAnswer refusal_answer(int status, const std::string& detail,
                             const std::string& request_id = {}, const std::string& decision = {},
                             const std::optional<std::string>& code = std::nullopt);
// An inference path asked with another method: 405 with Allow: POST; any other path: 404.
RefusalAnswer wrong_route_answer(RequestFlow& flow, std::string_view path);

// The last event of a stream the pod broke off (or broke the protocol of): the OpenAI error
// object as an SSE data event, so a client sees an error, not a truncated answer.
std::string mid_stream_error_event();

// What a pod's response gains on its way to the client: the pod it came from, the request id,
// the decision explanation when asked for.
std::vector<HeaderField> response_headers(const std::string& destination,
                                          const std::string& request_id,
                                          const std::string& decision);

// The standby check: a replica that is not the leader answers every request 503 with the
// reason (a load balancer that follows /readyz never sends here; the gateway's next try may
// reach the leader). `not_serving` null: always serves.
using NotServing = std::function<std::optional<std::string>()>;
std::optional<RequestFlow::Verdict> refuse_when_not_serving(RequestFlow& flow,
                                                            const NotServing& not_serving);

}  // namespace llmd::epp
