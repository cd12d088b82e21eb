#pragma once
// OpenAI request body -> SchedulingRequest (pure; no sockets). Counts input tokens as
// whitespace-separated words of the prompt text, as the simulator does.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "epp/interface/request.h"

namespace llmd::epp {

struct InboundHeaders {
  std::string request_id;
  std::optional<std::string> slo_ttft_ms;
  std::optional<std::string> slo_tpot_ms;
  std::optional<std::string> prediction_based_scheduling;
  std::string objective;
};

struct ParsedRequest {
  SchedulingRequest request;
  nlohmann::json body;
  bool chat = false;
  int64_t max_tokens = 16;
};

// Returns an error message (for a 400 JSON detail) or fills `out`.
std::optional<std::string> parse_openai_request(std::string_view path, std::string_view body,
                                                const InboundHeaders& headers,
                                                bool default_prediction, ParsedRequest& out);
int64_t count_words(std::string_view text);

}  // namespace llmd::epp
