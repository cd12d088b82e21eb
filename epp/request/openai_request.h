#pragma once
// OpenAI request body -> SchedulingRequest (pure; no sockets). Counts input tokens as
// whitespace-separated words of the prompt text, as the simulator does.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "epp/interface/request.h"
#include "epp/objectives/objectives.h"
#include "epp/request/inbound_headers.h"

namespace llmd::epp {

// What a request inherits when it does not say otherwise. Owned by the caller.
struct RequestDefaults {
  bool prediction_enabled = true;              // x-prediction-based-scheduling when absent
  const ObjectiveTable* objectives = nullptr;  // null: no objectives configured
  // --allow-debug-header: x-llmd-debug asks for the scheduling decision in x-llmd-decision
  // (off: the header is ignored, so clients cannot see the pool's pods and load).
  bool allow_debug_header = false;
};

struct ParsedRequest {
  SchedulingRequest request;
  nlohmann::json body;
  bool chat = false;
  int64_t max_tokens = 16;
  bool unknown_objective = false;      // named an objective the config does not have
  bool vllm_priority_in_body = false;  // the client set vLLM's own top-level `priority`
  // A completion's single string prompt was moved from `body` into request.prompt_text (one
  // copy of a long prompt instead of two); upstream_body() puts it back when it rewrites.
  bool prompt_in_text = false;
};

// Returns an error message (for a 400 JSON detail) or fills `out`.
std::optional<std::string> parse_openai_request(std::string_view path, std::string_view body,
                                                const InboundHeaders& headers,
                                                const RequestDefaults& defaults,
                                                ParsedRequest& out);

// The body to forward, or nullopt to forward the client's bytes unchanged: `override_params`
// (a JSON object from a model-level routing rule, may be null) is merged at the top level, and
// with `forward_priority` a non-zero soft priority becomes vLLM's `priority` field in vLLM's
// polarity (lower = served first), unless the client already set that field itself (it is in
// vLLM's polarity already and is never negated a second time).
std::optional<std::string> upstream_body(const ParsedRequest& parsed,
                                         const nlohmann::json& override_params,
                                         bool forward_priority);
// The prompt text a pod holds after answering `parsed` with `generated`, in the form the next
// turn will send it: chat = every message's text followed by a space, the answer being the next
// assistant message; completions = the prompt string continued by the answer. "" when there is
// no answer or no single conversation (a list of prompts).
std::string continuation_prompt(const ParsedRequest& parsed, std::string_view generated);
// The model name the pod will see (after override_params).
std::string target_model(const ParsedRequest& parsed, const nlohmann::json& override_params);
int64_t count_words(std::string_view text);

// The error object of the OpenAI API ({"error": {message, type, param, code}}), which the
// official SDKs parse into their exception. `param` names the offending request field or is
// null; `code` is a short string ("invalid_value", "model_not_found", ...) or null, never a
// number.
std::string openai_error_body(int status, const std::string& message,
                              const std::optional<std::string>& param,
                              const std::optional<std::string>& code);
// The same with param and code derived from the status and message: a 400 from
// parse_openai_request names its field as "field '<path>' ..." (e.g. messages[0].content),
// which becomes `param`; code: missing_required_parameter / invalid_value for such a field,
// rate_limit_exceeded (429), invalid_api_key (401), else null.
std::string openai_error_body(int status, const std::string& message);
// The request field a parse_openai_request message names, or nullopt (headers, bad JSON).
std::optional<std::string> error_param(std::string_view message);

}  // namespace llmd::epp
