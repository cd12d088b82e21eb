#include "epp/proxy/openai_request.h"

#include "common/json/validation.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace llmd::epp {
namespace {

using Json = nlohmann::json;

std::optional<double> parse_ms(const std::optional<std::string>& text, const char* name,
                               std::optional<std::string>& error) {
  if (!text || text->empty()) {
    return std::nullopt;
  }
  char* end = nullptr;
  double v = std::strtod(text->c_str(), &end);
  if (end == text->c_str() || *end != '\0' || !std::isfinite(v) || v <= 0) {
    error = std::string("header ") + name + " must be a positive number of milliseconds, got '" +
            *text + "'";
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

void append_content(const Json& content, std::string& out) {
  if (content.is_string()) {
    out += content.get<std::string>();
  } else if (content.is_array()) {
    for (const auto& part : content) {
      if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
          part["text"].is_string()) {
        out += part["text"].get<std::string>();
      }
    }
  }
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

std::optional<std::string> parse_openai_request(std::string_view path, std::string_view body,
                                                const InboundHeaders& headers,
                                                const RequestDefaults& defaults,
                                                ParsedRequest& out) {
  if (json::find_excess_depth(body) != std::string_view::npos) {
    return "request body is nested deeper than " + std::to_string(json::kMaxJsonDepth) +
           " levels";
  }
  try {
    out.body = Json::parse(body.begin(), body.end());
  } catch (const Json::exception&) {
    return "request body is not valid JSON";
  }
  if (!out.body.is_object()) {
    return "request body must be a JSON object";
  }
  SchedulingRequest& r = out.request;
  r.request_id = headers.request_id;
  r.objective = headers.objective;
  if (!out.body.contains("model") || !out.body["model"].is_string()) {
    return "field 'model' (string) is required";
  }
  r.model = out.body["model"].get<std::string>();
  out.chat = path.ends_with("/chat/completions");
  if (out.chat) {
    const Json& messages = out.body.value("messages", Json());
    if (!messages.is_array() || messages.empty()) {
      return "field 'messages' (non-empty list) is required for chat completions";
    }
    for (const auto& m : messages) {
      if (m.is_object() && m.contains("content")) {
        append_content(m["content"], r.prompt_text);
        r.prompt_text += ' ';
      }
    }
  } else {
    const Json& prompt = out.body.value("prompt", Json());
    if (prompt.is_string()) {
      r.prompt_text = prompt.get<std::string>();
    } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_string()) {
      for (const auto& p : prompt) {
        if (p.is_string()) {
          r.prompt_text += p.get<std::string>() + " ";
        }
      }
    } else {
      return "field 'prompt' (string) is required for completions";
    }
  }
  r.input_tokens = count_words(r.prompt_text);
  r.streaming = out.body.value("stream", false) == true;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (out.body.contains(key) && out.body[key].is_number_integer()) {
      out.max_tokens = out.body[key].get<int64_t>();
    }
  }
  const Objective* objective = nullptr;
  if (!r.objective.empty() && defaults.objectives != nullptr) {
    objective = defaults.objectives->find(r.objective);
  }
  out.unknown_objective = !r.objective.empty() && objective == nullptr;
  if (objective != nullptr) {
    r.priority = objective->priority;
    r.strict_priority = objective->strict_priority;
  }
  if (out.body.contains("nvext") && out.body["nvext"].is_object()) {
    const Json& hints = out.body["nvext"].value("agent_hints", Json());
    if (hints.is_object()) {
      if (hints.contains("priority")) {
        if (!hints["priority"].is_number_integer()) {
          return "field 'nvext.agent_hints.priority' must be an integer";
        }
        r.priority = hints["priority"].get<int64_t>();
      }
      if (hints.contains("strict_priority")) {
        if (!hints["strict_priority"].is_number_integer() ||
            hints["strict_priority"].get<int64_t>() < 0) {
          return "field 'nvext.agent_hints.strict_priority' must be an unsigned integer";
        }
        r.strict_priority = hints["strict_priority"].get<int64_t>();
      }
    }
  }
  out.vllm_priority_in_body = out.body.contains("priority") && !out.body["priority"].is_null();
  std::optional<std::string> error;
  if (auto p = parse_int(headers.priority, "x-dynamo-request-priority", error)) {
    r.priority = *p;
  }
  if (auto p = parse_int(headers.strict_priority, "x-dynamo-request-strict-priority", error)) {
    if (*p < 0) {
      return "header x-dynamo-request-strict-priority must be an unsigned integer";
    }
    r.strict_priority = *p;
  }
  r.slo_ttft_ms = parse_ms(headers.slo_ttft_ms, "x-slo-ttft-ms", error);
  r.slo_tpot_ms = parse_ms(headers.slo_tpot_ms, "x-slo-tpot-ms", error);
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
  if (headers.subject) {
    r.subject = *headers.subject;
  }
  if (headers.metadata && !headers.metadata->empty()) {
    Json m = json::find_excess_depth(*headers.metadata) == std::string_view::npos
                 ? Json::parse(*headers.metadata, nullptr, false)
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
  }
  r.prediction_enabled = defaults.prediction_enabled;
  if (headers.prediction_based_scheduling) {
    std::string v = *headers.prediction_based_scheduling;
    for (auto& c : v) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (v == "false" || v == "0" || v == "no") {
      r.prediction_enabled = false;
    } else if (v == "true" || v == "1" || v == "yes") {
      r.prediction_enabled = true;
    } else {
      return "header x-prediction-based-scheduling must be true or false";
    }
  }
  return std::nullopt;
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
  const auto it = parsed.body.find("prompt");
  if (it == parsed.body.end() || !it->is_string()) {
    return {};
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

}  // namespace llmd::epp
