#pragma once
// Incremental reader of an OpenAI SSE response as it streams through the proxy: notices the
// first content chunk (TTFT), counts content chunks (vLLM streams one token per chunk, so this
// is the token count of a stream without usage), keeps the generated text (bounded; the prefix
// index learns it) and picks up the final usage chunk. Pure; fed arbitrary byte splits of the
// stream. Linear in its input; a line longer than kMaxLineBytes is the pod's protocol error
// (overlong(): the scanner stops and holds nothing more).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "epp/request/openai_request.h"
#include "epp/request/request_context.h"

namespace llmd::epp {

class SseScanner {
 public:
  // Returns true when this call saw the first event carrying generated content.
  bool feed(std::string_view bytes);
  // No OpenAI event comes near this; a line that does is a pod that does not speak SSE.
  static constexpr std::size_t kMaxLineBytes = 1024 * 1024;
  bool overlong() const { return overlong_; }
  bool saw_content() const { return saw_content_; }
  bool saw_done() const { return saw_done_; }
  int64_t content_chunks() const { return content_chunks_; }
  // Generated text of the first choice, at most kMaxGeneratedText bytes.
  const std::string& generated_text() const { return text_; }
  static constexpr std::size_t kMaxGeneratedText = 64 * 1024;
  std::optional<int64_t> completion_tokens() const { return completion_tokens_; }
  std::optional<int64_t> prompt_tokens() const { return prompt_tokens_; }
  std::optional<int64_t> cached_tokens() const { return cached_tokens_; }

 private:
  bool handle_event(std::string_view data);
  std::string pending_;  // the unterminated last line (never holds a '\n')
  bool overlong_ = false;
  bool saw_content_ = false;
  bool saw_done_ = false;
  int64_t content_chunks_ = 0;
  std::string text_;
  std::optional<int64_t> completion_tokens_;
  std::optional<int64_t> prompt_tokens_;
  std::optional<int64_t> cached_tokens_;
};

// Usage and generated text of a non-streaming response body.
struct Usage {
  std::optional<int64_t> prompt_tokens;
  std::optional<int64_t> completion_tokens;
  std::optional<int64_t> cached_tokens;
  std::string generated_text;  // first choice's text / message content (bounded as above)
};
Usage parse_usage(std::string_view json_body);

// What a finished response taught about its request: completion tokens (usage, or a stream's
// content chunks counted), cached tokens, and the prompt the pod now holds (the prefix index
// learns it); a non-streamed body's TTFT is its end-to-end time. `body` is the non-streamed
// body (ignored for streams).
ResponseFacts response_facts(const ParsedRequest& parsed, const SseScanner& stream,
                             std::string_view body);

}  // namespace llmd::epp
