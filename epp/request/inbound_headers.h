#pragma once
// The request headers the EPP reads, for both ingresses (the proxy's HTTP request, the
// gateway's ext_proc request headers), under every name upstream reads them by.
//
// Header (lower case)             upstream name(s), current first        meaning
// x-llm-d-slo-ttft-ms             llm-d-router; x-slo-ttft-ms (GIE v1.5.0, llm-d's old name)
//                                                                       TTFT SLO, float ms
// x-llm-d-slo-tpot-ms             llm-d-router; x-slo-tpot-ms (idem)     TPOT SLO, float ms
// x-llm-d-inference-objective     llm-d-router; x-gateway-inference-objective (GIE v1.5.0)
//                                                                       objective name
// x-request-id                    both                                  request id (made if absent)
// Our own (no upstream name): x-prediction-based-scheduling (GIE v1.2.0 had it), x-subject,
// x-metadata, x-dynamo-request-priority, x-dynamo-request-strict-priority, x-llmd-debug.
//
// Precedence when a request carries both spellings: the current (x-llm-d-*) name wins, as in
// llm-d-router's metadata.GetLowerCaseHeaderValue (the first name present is the value, even
// an empty one); a different value under the old name is ignored and logged at debug level.
// docs/coming-from-upstream.md lists every upstream header beside ours.
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace llmd::epp {

inline constexpr char kTtftSloHeader[] = "x-llm-d-slo-ttft-ms";
inline constexpr char kOldTtftSloHeader[] = "x-slo-ttft-ms";
inline constexpr char kTpotSloHeader[] = "x-llm-d-slo-tpot-ms";
inline constexpr char kOldTpotSloHeader[] = "x-slo-tpot-ms";
inline constexpr char kObjectiveHeader[] = "x-llm-d-inference-objective";
inline constexpr char kOldObjectiveHeader[] = "x-gateway-inference-objective";

struct InboundHeaders {
  std::string request_id;
  std::optional<std::string> slo_ttft_ms;
  std::optional<std::string> slo_tpot_ms;
  // The names that carried the SLOs (a 400 about a bad value names the header the client sent).
  std::string slo_ttft_header = kTtftSloHeader;
  std::string slo_tpot_header = kTpotSloHeader;
  std::optional<std::string> prediction_based_scheduling;
  std::string objective;
  std::optional<std::string> subject;          // x-subject
  std::optional<std::string> metadata;         // x-metadata
  std::optional<std::string> priority;         // x-dynamo-request-priority
  std::optional<std::string> strict_priority;  // x-dynamo-request-strict-priority
  std::optional<std::string> debug;            // x-llmd-debug
};

// `lookup` returns a header's value by lower-case name (nullopt when absent). A request
// without x-request-id gets a new one.
using HeaderLookup = std::function<std::optional<std::string>(std::string_view name)>;
InboundHeaders read_inbound_headers(const HeaderLookup& lookup);

// A fresh x-request-id (32 hex digits) for requests that come without one.
std::string new_request_id();

}  // namespace llmd::epp
