#include "epp/proxy/openai_request.h"

#include <cctype>
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
                                                bool default_prediction, ParsedRequest& out) {
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
  if (out.body.contains("nvext") && out.body["nvext"].is_object()) {
    const Json& hints = out.body["nvext"].value("agent_hints", Json());
    if (hints.is_object()) {
      if (hints.contains("priority") && hints["priority"].is_number_integer()) {
        r.priority = hints["priority"].get<int64_t>();
      }
      if (hints.contains("strict_priority") && hints["strict_priority"].is_number_integer()) {
        r.strict_priority = std::max<int64_t>(0, hints["strict_priority"].get<int64_t>());
      }
    }
  }
  std::optional<std::string> error;
  r.slo_ttft_ms = parse_ms(headers.slo_ttft_ms, "x-slo-ttft-ms", error);
  r.slo_tpot_ms = parse_ms(headers.slo_tpot_ms, "x-slo-tpot-ms", error);
  if (error) {
    return error;
  }
  r.prediction_enabled = default_prediction;
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

}  // namespace llmd::epp
