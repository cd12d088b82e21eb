#include "epp/proxy/sse_scanner.h"

#include <nlohmann/json.hpp>

namespace llmd::epp {
namespace {

using Json = nlohmann::json;

void read_usage(const Json& usage, std::optional<int64_t>& prompt,
                std::optional<int64_t>& completion, std::optional<int64_t>& cached) {
  if (!usage.is_object()) {
    return;
  }
  if (usage.contains("prompt_tokens") && usage["prompt_tokens"].is_number_integer()) {
    prompt = usage["prompt_tokens"].get<int64_t>();
  }
  if (usage.contains("completion_tokens") && usage["completion_tokens"].is_number_integer()) {
    completion = usage["completion_tokens"].get<int64_t>();
  }
  const Json& details = usage.value("prompt_tokens_details", Json());
  if (details.is_object() && details.contains("cached_tokens") &&
      details["cached_tokens"].is_number_integer()) {
    cached = details["cached_tokens"].get<int64_t>();
  }
}

bool has_content(const Json& choices) {
  if (!choices.is_array()) {
    return false;
  }
  for (const auto& c : choices) {
    if (!c.is_object()) {
      continue;
    }
    if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) {
      return true;
    }
    const Json& delta = c.value("delta", Json());
    if (delta.is_object() && delta.contains("content") && delta["content"].is_string() &&
        !delta["content"].get<std::string>().empty()) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool SseScanner::feed(std::string_view bytes) {
  pending_.append(bytes);
  bool first = false;
  std::size_t pos;
  // Events end with a blank line; normalise CRLF so both framings work.
  while ((pos = pending_.find('\n')) != std::string::npos) {
    std::string line = pending_.substr(0, pos);
    pending_.erase(0, pos + 1);
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    if (line.rfind("data:", 0) == 0) {
      std::string_view data(line);
      data.remove_prefix(5);
      while (!data.empty() && data.front() == ' ') {
        data.remove_prefix(1);
      }
      first = handle_event(data) || first;
    }
  }
  return first;
}

bool SseScanner::handle_event(std::string_view data) {
  if (data == "[DONE]") {
    saw_done_ = true;
    return false;
  }
  Json j = Json::parse(data.begin(), data.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return false;
  }
  if (j.contains("usage")) {
    read_usage(j["usage"], prompt_tokens_, completion_tokens_, cached_tokens_);
  }
  if (!saw_content_ && has_content(j.value("choices", Json()))) {
    saw_content_ = true;
    return true;
  }
  return false;
}

Usage parse_usage(std::string_view json_body) {
  Usage u;
  Json j = Json::parse(json_body.begin(), json_body.end(), nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("usage")) {
    read_usage(j["usage"], u.prompt_tokens, u.completion_tokens, u.cached_tokens);
  }
  return u;
}

}  // namespace llmd::epp
