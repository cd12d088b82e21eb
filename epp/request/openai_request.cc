#include "epp/request/openai_request.h"

#include <fmt/format.h>

#include "common/json/lax_bool.h"
#include "common/json/validation.h"

#include <cctype>
#include <cstdint>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace llmd::epp {
namespace {

using Json = nlohmann::json;

// The JSON type of a value as the error message names it.
const char* json_type_name(const Json& v) {
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_number()) return "number";
  if (v.is_object()) return "object";
  if (v.is_array()) return "list";
  return "null";
}

// A field present with the wrong JSON type: the message ends in ", got a <type>", which
// openai_error_body turns into OpenAI's code invalid_type.
std::string wrong_type(const std::string& field, const std::string& expected, const Json& got) {
  return "field '" + field + "' must be " + expected + ", got a " + json_type_name(got);
}

std::optional<double> parse_ms(const std::optional<std::string>& text, const std::string& name,
                               std::optional<std::string>& error) {
  if (!text || text->empty()) {
    return std::nullopt;
  }
  char* end = nullptr;
  double v = std::strtod(text->c_str(), &end);
  if (end == text->c_str() || *end != '\0' || !std::isfinite(v) || v <= 0) {
    error = "header " + name + " must be a positive number of milliseconds, got '" + *text + "'";
    return std::nullopt;
  }
  return v;
}

std::optional<int64_t> parse_int(const std::optional<std::string>& text, const char* name,
                                 std::optional<std::string>& error) {
  if (!text || text->empty()) {
    return std::nullopt;
  }
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text->c_str(), &end, 10);
  if (end == text->c_str() || *end != '\0' || errno != 0) {
    error = std::string("header ") + name + " must be an integer, got '" + *text + "'";
    return std::nullopt;
  }
  return static_cast<int64_t>(v);
}

// A client's value in an error message: its JSON, cut to a readable length.
std::string shown(const Json& v) {
  constexpr std::size_t kMax = 40;
  std::string out = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (out.size() > kMax) {
    out.resize(kMax);
    out += "...";
  }
  return out;
}

// Priorities travel to vLLM negated and are compared as int64 here: the int32 range keeps
// both exact (INT64_MIN cannot be negated; 2^64-1 is not an int64).
bool in_priority_range(const Json& v) {
  if (!v.is_number_integer()) {
    return false;
  }
  if (v.is_number_unsigned()) {
    return v.get<uint64_t>() <= static_cast<uint64_t>(INT32_MAX);
  }
  const int64_t x = v.get<int64_t>();
  return x >= INT32_MIN && x <= INT32_MAX;
}

// Token ids as the prefix index's text: one word per id, so the word count is the token count
// and requests that share leading ids share a prefix.
bool append_token_ids(const Json& ids, std::string& out) {
  for (const auto& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      return false;
    }
    out += std::to_string(id.get<int64_t>());
    out += ' ';
  }
  return true;
}

// The completions API's prompt forms (as vLLM accepts them): a string, a list of strings, a
// list of token ids, or a list of token-id lists. Batched prompts are scheduled as one request.
std::optional<std::string> prompt_text(const Json& prompt, std::string& out) {
  const char* kShape =
      "field 'prompt' must be a string, a list of strings, a list of token ids or a list of "
      "token-id lists";
  if (prompt.is_string()) {
    out = prompt.get<std::string>();
    return std::nullopt;
  }
  if (!prompt.is_array() || prompt.empty()) {
    return std::string(kShape);
  }
  if (prompt[0].is_number()) {
    return append_token_ids(prompt, out) ? std::nullopt : std::optional<std::string>(kShape);
  }
  for (const auto& p : prompt) {
    if (p.is_string()) {
      out += p.get<std::string>() + " ";
    } else if (!p.is_array() || p.empty() || !append_token_ids(p, out)) {
      return std::string(kShape);
    }
  }
  return std::nullopt;
}

// The text of a message's content (a string or a list of parts); an error names the field
// when a part has the wrong shape (the EPP reads it, so it answers for it).
std::optional<std::string> append_content(const Json& content, std::size_t message,
                                          std::string& out) {
  if (content.is_string()) {
    out += content.get<std::string>();
  } else if (content.is_array()) {
    for (std::size_t k = 0; k < content.size(); ++k) {
      const Json& part = content[k];
      const std::string where =
          "messages[" + std::to_string(message) + "].content[" + std::to_string(k) + "]";
      if (!part.is_object()) {
        return "field '" + where + "' must be an object";
      }
      const auto type = part.find("type");
      if (type == part.end() || !type->is_string()) {
        return "field '" + where + ".type' (string) is required";
      }
      if (*type == "text") {
        const auto text = part.find("text");
        if (text == part.end() || !text->is_string()) {
          return "field '" + where + ".text' (string) is required for a text part";
        }
        out += text->get<std::string>();
      }
    }
  } else if (!content.is_null()) {
    return "field 'messages[" + std::to_string(message) + "].content' must be a string or a list";
  }
  return std::nullopt;
}

}  // namespace

int64_t count_words(std::string_view text) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : text) {
    bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (!space && !in_word) {
      ++n;
    }
    in_word = !space;
  }
  return n;
}

namespace {

using Error = std::optional<std::string>;

// The body as JSON: bounded depth, parsed without exceptions (a bad body is the client's error,
// never a throw on the data path).
Error parse_body(std::string_view body, Json& out) {
  if (json::find_excess_depth(body) != std::string_view::npos) {
    return "request body is nested deeper than " + std::to_string(json::kMaxJsonDepth) + " levels";
  }
  out = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) {
    return "request body is not valid JSON";
  }
  if (!out.is_object()) {
    return "request body must be a JSON object";
  }
  return std::nullopt;
}

// Chat messages: each an object with a string role; their text (content strings and text
// parts), each followed by a space, is the prompt.
Error read_messages(const Json& body, std::string& prompt) {
  const Json& messages = body.value("messages", Json());
  if (messages.is_null()) {
    return "field 'messages' (non-empty list) is required for chat completions";
  }
  if (!messages.is_array()) {
    return wrong_type("messages", "a list of message objects", messages);
  }
  if (messages.empty()) {
    return "field 'messages' must not be empty";
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) {
      return "field '" + where + "' must be an object";
    }
    const auto role = m.find("role");
    if (role == m.end() || role->is_null()) {
      return "field '" + where + ".role' (string) is required";
    }
    if (!role->is_string()) {
      return wrong_type(where + ".role", "a string", *role);
    }
    if (const auto content = m.find("content"); content != m.end()) {
      if (auto error = append_content(*content, i, prompt)) {
        return error;
      }
      prompt += ' ';
    }
  }
  return std::nullopt;
}

// The prompt text of a chat or completions request. A completion's single string prompt moves
// out of the body (one copy of a long prompt instead of two).
Error read_prompt(ParsedRequest& out) {
  std::string& text = out.request.prompt_text;
  if (out.chat) {
    return read_messages(out.body, text);
  }
  if (auto p = out.body.find("prompt"); p != out.body.end() && p->is_string()) {
    text = std::move(p->get_ref<std::string&>());
    *p = "";
    out.prompt_in_text = true;
    return std::nullopt;
  }
  return prompt_text(out.body.value("prompt", Json()), text);
}

// The generation fields the EPP reads, type-checked: a wrong type is the client's error (400
// naming the field). Booleans as vLLM reads them (pydantic's lax mode,
// common/json/lax_bool.h): "stream": "true" streams; the body goes to the pod as written.
Error read_generation_fields(ParsedRequest& out) {
  const Json& body = out.body;
  if (const auto s = body.find("stream"); s != body.end() && !s->is_null()) {
    const auto v = json::lax_bool(*s);
    if (!v) {
      return "field 'stream' must be a boolean (true, false, 0, 1, \"true\", \"false\", ...), "
             "got " +
             shown(*s);
    }
    out.request.streaming = *v;
  }
  if (const auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) {
      return "field 'stream_options' must be an object";
    }
    if (const auto u = so->find("include_usage");
        u != so->end() && !u->is_null() && !json::lax_bool(*u)) {
      return "field 'stream_options.include_usage' must be a boolean, got " + shown(*u);
    }
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (const auto m = body.find(key); m != body.end() && !m->is_null()) {
      if (!m->is_number_integer() || m->get<int64_t>() < 0 ||
          (m->is_number_unsigned() && m->get<uint64_t>() > INT64_MAX)) {
        return std::string("field '") + key + "' must be a non-negative integer";
      }
      out.max_tokens = m->get<int64_t>();
    }
  }
  return std::nullopt;
}

// Dynamo's nvext.agent_hints priorities in the body (over the objective's).
Error read_agent_hints(const Json& body, SchedulingRequest& r) {
  const auto nvext = body.find("nvext");
  if (nvext == body.end() || !nvext->is_object()) {
    return std::nullopt;
  }
  const Json& hints = nvext->value("agent_hints", Json());
  if (!hints.is_object()) {
    return std::nullopt;
  }
  if (const auto p = hints.find("priority"); p != hints.end()) {
    if (!in_priority_range(*p)) {
      return "field 'nvext.agent_hints.priority' must be an integer in [-2147483648, "
             "2147483647]";
    }
    r.priority = p->get<int64_t>();
  }
  if (const auto p = hints.find("strict_priority"); p != hints.end()) {
    if (!in_priority_range(*p) || p->get<int64_t>() < 0) {
      return "field 'nvext.agent_hints.strict_priority' must be an integer in [0, "
             "2147483647]";
    }
    r.strict_priority = p->get<int64_t>();
  }
  return std::nullopt;
}

// The priority and SLO headers (over the body and the objective); the objective's SLOs fill
// what the headers leave out.
Error read_priority_and_slo_headers(const InboundHeaders& headers, const Objective* objective,
                                    SchedulingRequest& r) {
  Error error;
  if (auto p = parse_int(headers.priority, "x-dynamo-request-priority", error)) {
    if (*p < INT32_MIN || *p > INT32_MAX) {
      return "header x-dynamo-request-priority must be an integer in [-2147483648, 2147483647]";
    }
    r.priority = *p;
  }
  if (auto p = parse_int(headers.strict_priority, "x-dynamo-request-strict-priority", error)) {
    if (*p < 0 || *p > INT32_MAX) {
      return "header x-dynamo-request-strict-priority must be an integer in [0, 2147483647]";
    }
    r.strict_priority = *p;
  }
  r.slo_ttft_ms = parse_ms(headers.slo_ttft_ms, headers.slo_ttft_header, error);
  r.slo_tpot_ms = parse_ms(headers.slo_tpot_ms, headers.slo_tpot_header, error);
  if (error) {
    return error;
  }
  if (objective != nullptr) {
    if (!r.slo_ttft_ms) {
      r.slo_ttft_ms = objective->slo_ttft_ms;
    }
    if (!r.slo_tpot_ms) {
      r.slo_tpot_ms = objective->slo_tpot_ms;
    }
  }
  return std::nullopt;
}

Error read_metadata_header(const std::string& text, SchedulingRequest& r) {
  const Json m = json::find_excess_depth(text) == std::string_view::npos
                     ? Json::parse(text, nullptr, false)
                     : Json(Json::value_t::discarded);
  if (!m.is_object()) {
    return "header x-metadata must be a JSON object of strings, e.g. {\"tier\":\"gold\"}";
  }
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string()) {
      return "header x-metadata: value of '" + k + "' must be a string";
    }
    r.metadata[k] = v.get<std::string>();
  }
  return std::nullopt;
}

std::string lower(std::string v) {
  for (auto& c : v) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return v;
}

// Subject, metadata, the prediction switch and the debug header.
Error read_request_headers(const InboundHeaders& headers, const RequestDefaults& defaults,
                           SchedulingRequest& r) {
  if (headers.subject) {
    r.subject = *headers.subject;
  }
  if (headers.metadata && !headers.metadata->empty()) {
    if (auto error = read_metadata_header(*headers.metadata, r)) {
      return error;
    }
  }
  r.prediction_enabled = defaults.prediction_enabled;
  if (headers.prediction_based_scheduling) {
    const std::string v = lower(*headers.prediction_based_scheduling);
    if (v == "false" || v == "0" || v == "no") {
      r.prediction_enabled = false;
    } else if (v == "true" || v == "1" || v == "yes") {
      r.prediction_enabled = true;
    } else {
      return "header x-prediction-based-scheduling must be true or false";
    }
  }
  if (defaults.allow_debug_header && headers.debug) {
    // Any value but an explicit "no" asks: a debugging client is never refused over it.
    const std::string v = lower(*headers.debug);
    r.explain = !(v == "0" || v == "false" || v == "no" || v == "off");
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> parse_openai_request(std::string_view path, std::string_view body,
                                                const InboundHeaders& headers,
                                                const RequestDefaults& defaults,
                                                ParsedRequest& out) {
  if (auto error = parse_body(body, out.body)) {
    return error;
  }
  SchedulingRequest& r = out.request;
  r.request_id = headers.request_id;
  r.objective = headers.objective;
  const auto model = out.body.find("model");
  if (model == out.body.end() || !model->is_string()) {
    return "field 'model' (string) is required";
  }
  r.model = model->get<std::string>();
  out.chat = path.ends_with("/chat/completions");
  if (auto error = read_prompt(out)) {
    return error;
  }
  r.input_tokens = count_words(r.prompt_text);
  if (auto error = read_generation_fields(out)) {
    return error;
  }
  const Objective* objective = r.objective.empty() || defaults.objectives == nullptr
                                   ? nullptr
                                   : defaults.objectives->find(r.objective);
  out.unknown_objective = !r.objective.empty() && objective == nullptr;
  if (objective != nullptr) {
    r.priority = objective->priority;
    r.strict_priority = objective->strict_priority;
  }
  if (auto error = read_agent_hints(out.body, r)) {
    return error;
  }
  const auto vllm_priority = out.body.find("priority");
  out.vllm_priority_in_body = vllm_priority != out.body.end() && !vllm_priority->is_null();
  if (auto error = read_priority_and_slo_headers(headers, objective, r)) {
    return error;
  }
  return read_request_headers(headers, defaults, r);
}

std::optional<std::string> upstream_body(const ParsedRequest& parsed,
                                         const nlohmann::json& override_params,
                                         bool forward_priority) {
  const bool set_priority =
      forward_priority && parsed.request.priority != 0 && !parsed.vllm_priority_in_body;
  const bool overrides = override_params.is_object() && !override_params.empty();
  if (!set_priority && !overrides) {
    return std::nullopt;
  }
  Json body = parsed.body;
  if (parsed.prompt_in_text) {
    body["prompt"] = parsed.request.prompt_text;
  }
  if (set_priority) {
    body["priority"] = -parsed.request.priority;
  }
  if (overrides) {
    for (const auto& [k, v] : override_params.items()) {
      body[k] = v;
    }
  }
  return body.dump();
}

std::string continuation_prompt(const ParsedRequest& parsed, std::string_view generated) {
  if (generated.empty()) {
    return {};
  }
  if (parsed.chat) {
    std::string out = parsed.request.prompt_text;
    out.append(generated);
    out += ' ';
    return out;
  }
  if (!parsed.prompt_in_text) {
    return {};  // a list of prompts, or token ids: no single conversation
  }
  return parsed.request.prompt_text + std::string(generated);
}

std::string target_model(const ParsedRequest& parsed, const nlohmann::json& override_params) {
  if (override_params.is_object() && override_params.contains("model") &&
      override_params["model"].is_string()) {
    return override_params["model"].get<std::string>();
  }
  return parsed.request.model;
}

std::string openai_error_body(int status, const std::string& message,
                              const std::optional<std::string>& param,
                              const std::optional<std::string>& code) {
  const char* type = status == 429   ? "rate_limit_error"
                     : status == 404 ? "not_found_error"
                     : status == 401 ? "authentication_error"
                     : status < 500  ? "invalid_request_error"
                     : status == 503 ? "service_unavailable_error"
                                     : "server_error";
  auto or_null = [](const std::optional<std::string>& v) { return v ? Json(*v) : Json(nullptr); };
  return Json{
      {"error",
       {{"message", message}, {"type", type}, {"param", or_null(param)}, {"code", or_null(code)}}}}
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::optional<std::string> error_param(std::string_view message) {
  constexpr std::string_view kField = "field '";
  if (!message.starts_with(kField)) {
    return std::nullopt;
  }
  const auto end = message.find('\'', kField.size());
  if (end == std::string_view::npos || end == kField.size()) {
    return std::nullopt;
  }
  return std::string(message.substr(kField.size(), end - kField.size()));
}

namespace {
bool is_wrong_type(std::string_view message) {
  for (const char* type : {"string", "boolean", "number", "object", "list", "null"}) {
    if (message.ends_with(std::string(", got a ") + type)) {
      return true;
    }
  }
  return false;
}
}  // namespace

std::string openai_error_body(int status, const std::string& message) {
  std::optional<std::string> param;
  std::optional<std::string> code;
  if (status == 400) {
    param = error_param(message);
    if (param) {
      code = message.find("is required") != std::string::npos ? "missing_required_parameter"
             : is_wrong_type(message)                         ? "invalid_type"
                                                              : "invalid_value";
    }
  } else if (status == 429) {
    code = "rate_limit_exceeded";
  } else if (status == 401) {
    code = "invalid_api_key";
  }
  return openai_error_body(status, message, param, code);
}

}  // namespace llmd::epp
