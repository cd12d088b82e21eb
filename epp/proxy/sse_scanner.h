#pragma once
// Incremental reader of an OpenAI SSE response as it streams through the proxy: notices the
// first content chunk (TTFT) and picks up the final usage chunk. Pure; fed arbitrary byte
// splits of the stream.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llmd::epp {

class SseScanner {
 public:
  // Returns true when this call saw the first event carrying generated content.
  bool feed(std::string_view bytes);
  bool saw_content() const { return saw_content_; }
  bool saw_done() const { return saw_done_; }
  std::optional<int64_t> completion_tokens() const { return completion_tokens_; }
  std::optional<int64_t> prompt_tokens() const { return prompt_tokens_; }
  std::optional<int64_t> cached_tokens() const { return cached_tokens_; }

 private:
  bool handle_event(std::string_view data);
  std::string pending_;
  bool saw_content_ = false;
  bool saw_done_ = false;
  std::optional<int64_t> completion_tokens_;
  std::optional<int64_t> prompt_tokens_;
  std::optional<int64_t> cached_tokens_;
};

// Usage of a non-streaming response body.
struct Usage {
  std::optional<int64_t> prompt_tokens;
  std::optional<int64_t> completion_tokens;
  std::optional<int64_t> cached_tokens;
};
Usage parse_usage(std::string_view json_body);

}  // namespace llmd::epp
