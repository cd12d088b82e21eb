#include "epp/request/transport_policy.h"

#include "epp/request/openai_request.h"

namespace llmd::epp {

bool is_inference_path(std::string_view path) {
  return path == "/v1/completions" || path == "/v1/chat/completions";
}

bool is_inference_request(std::string_view method, std::string_view path) {
  return method == "POST" && is_inference_path(path);
}

RefusalAnswer refusal_answer(int status, const std::string& detail, const std::string& request_id,
                             const std::string& decision, const std::optional<std::string>& code) {
  RefusalAnswer a;
  a.status = status;
  a.body = code ? openai_error_body(status, detail, std::nullopt, code)
                : openai_error_body(status, detail);
  a.headers.push_back({"Content-Type", "application/json"});
  if (status == 429 || status == 503) {
    a.headers.push_back({"Retry-After", "1"});
  }
  if (!request_id.empty()) {
    a.headers.push_back({kRequestIdHeader, request_id});
  }
  if (!decision.empty()) {
    a.headers.push_back({kDecisionHeader, decision});
  }
  return a;
}

RefusalAnswer wrong_route_answer(RequestFlow& flow, std::string_view path) {
  const bool known = is_inference_path(path);
  const RequestFlow::Verdict v =
      flow.refuse(known ? 405 : 404, "Use POST /v1/completions or /v1/chat/completions");
  RefusalAnswer a = refusal_answer(v.status, v.detail);
  if (known) {
    a.headers.push_back({"Allow", "POST"});
  }
  return a;
}

std::string mid_stream_error_event() {
  return "data: " + openai_error_body(502, "The model server failed while streaming the response") +
         "\n\n";
}

std::vector<HeaderField> response_headers(const std::string& destination,
                                          const std::string& request_id,
                                          const std::string& decision) {
  std::vector<HeaderField> h;
  if (!destination.empty()) {
    h.push_back({kDestinationHeader, destination});
  }
  if (!request_id.empty()) {
    h.push_back({kRequestIdHeader, request_id});
  }
  if (!decision.empty()) {
    h.push_back({kDecisionHeader, decision});
  }
  return h;
}

std::optional<RequestFlow::Verdict> refuse_when_not_serving(RequestFlow& flow,
                                                            const NotServing& not_serving) {
  if (!not_serving) {
    return std::nullopt;
  }
  if (auto reason = not_serving()) {
    return flow.refuse(503, *reason);
  }
  return std::nullopt;
}

}  // namespace llmd::epp
