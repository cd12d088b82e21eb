#include "epp/request/sse_scanner.h"

#include "common/json/validation.h"

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

// Appends the first choice's generated text (completions `text`, chat `delta.content` or
// `message.content`) to `out` up to the bound; returns whether the event carried any.
bool append_content(const Json& choices, std::string& out) {
  if (!choices.is_array()) {
    return false;
  }
  for (const auto& c : choices) {
    if (!c.is_object()) {
      continue;
    }
    const Json* piece = nullptr;
    if (c.contains("text") && c["text"].is_string()) {
      piece = &c["text"];
    } else {
      for (const char* key : {"delta", "message"}) {
        const auto d = c.find(key);
        if (d != c.end() && d->is_object()) {
          const auto content = d->find("content");
          if (content != d->end() && content->is_string()) {
            piece = &*content;
            break;
          }
        }
      }
    }
    if (piece == nullptr) {
      continue;
    }
    const auto& text = piece->get_ref<const std::string&>();
    if (text.empty()) {
      continue;
    }
    const bool first_choice =
        !c.contains("index") || (c["index"].is_number_integer() && c["index"].get<int64_t>() == 0);
    if (first_choice && out.size() < SseScanner::kMaxGeneratedText) {
      out.append(text, 0, SseScanner::kMaxGeneratedText - out.size());
    }
    return true;
  }
  return false;
}

}  // namespace

bool SseScanner::feed(std::string_view bytes) {
  if (overlong_) {
    return false;
  }
  // Only the new bytes are searched, and what was read is dropped once per call: linear however
  // the stream is split.
  std::size_t search = pending_.size();
  pending_.append(bytes);
  std::size_t start = 0;
  bool first = false;
  std::size_t pos;
  while ((pos = pending_.find('\n', search)) != std::string::npos) {
    std::string_view line(pending_.data() + start, pos - start);
    start = search = pos + 1;
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);  // events end with a blank line; CRLF framing works too
    }
    if (line.starts_with("data:")) {
      std::string_view data = line.substr(5);
      while (!data.empty() && data.front() == ' ') {
        data.remove_prefix(1);
      }
      first = handle_event(data) || first;
    }
  }
  pending_.erase(0, start);
  if (pending_.size() > kMaxLineBytes) {
    overlong_ = true;
    std::string().swap(pending_);
  }
  return first;
}

bool SseScanner::handle_event(std::string_view data) {
  if (data == "[DONE]") {
    saw_done_ = true;
    return false;
  }
  if (json::find_excess_depth(data) != std::string_view::npos) {
    return false;  // no event of the OpenAI API nests that deep
  }
  Json j = Json::parse(data.begin(), data.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return false;
  }
  if (j.contains("usage")) {
    read_usage(j["usage"], prompt_tokens_, completion_tokens_, cached_tokens_);
  }
  if (!append_content(j.value("choices", Json()), text_)) {
    return false;
  }
  ++content_chunks_;
  if (!saw_content_) {
    saw_content_ = true;
    return true;
  }
  return false;
}

Usage parse_usage(std::string_view json_body) {
  Usage u;
  if (json::find_excess_depth(json_body) != std::string_view::npos) {
    return u;
  }
  Json j = Json::parse(json_body.begin(), json_body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return u;
  }
  if (j.contains("usage")) {
    read_usage(j["usage"], u.prompt_tokens, u.completion_tokens, u.cached_tokens);
  }
  append_content(j.value("choices", Json()), u.generated_text);
  return u;
}

ResponseFacts response_facts(const ParsedRequest& parsed, const SseScanner& stream,
                             std::string_view body) {
  ResponseFacts facts;
  if (parsed.request.streaming) {
    facts.completion_tokens = stream.completion_tokens();
    if (!facts.completion_tokens && stream.content_chunks() > 0) {
      facts.completion_tokens = stream.content_chunks();  // no usage chunk: count the tokens
    }
    facts.cached_tokens = stream.cached_tokens();
    facts.prompt_tokens = stream.prompt_tokens();
    facts.continuation_prompt = continuation_prompt(parsed, stream.generated_text());
  } else {
    Usage u = parse_usage(body);
    facts.completion_tokens = u.completion_tokens;
    facts.cached_tokens = u.cached_tokens;
    facts.prompt_tokens = u.prompt_tokens;
    facts.ttft_is_e2e = true;
    facts.continuation_prompt = continuation_prompt(parsed, u.generated_text);
  }
  return facts;
}

}  // namespace llmd::epp
