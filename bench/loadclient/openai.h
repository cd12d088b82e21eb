#pragma once
// Client side of the OpenAI-compatible API: request bodies for multi-turn conversations and an
// accumulator that reads a streamed (SSE) or whole response. Pure; no I/O. Not thread-safe.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmd::loadclient {

enum class Api { kCompletions, kChat };
std::optional<Api> parse_api(std::string_view name);  // "completions" | "chat"
std::string_view api_path(Api api);                   // "/v1/completions" | "/v1/chat/completions"

struct RequestOptions {
  Api api = Api::kCompletions;
  std::string model = "meta-llama/Llama-3.1-8B-Instruct";
  bool stream = true;
  bool include_usage = true;
  bool ignore_eos = true;  // vLLM extension: generate exactly max_tokens
  // Where a request's priority goes: always `nvext.agent_hints.priority` (EPP polarity, higher
  // = more important); with vllm_priority also vLLM's `priority` field (negated: lower first).
  bool vllm_priority = false;
};

// One user's conversation. Turn k's prompt is the system prompt, the earlier questions and
// answers in order, and the new question (completions: words joined by single spaces; chat:
// one message each). Answers of failed turns are never added.
class Conversation {
 public:
  void reset(std::string system_prompt);
  // Body for the next turn; remembers the question until answer() or drop_question().
  std::string body(const std::string& question, int64_t max_tokens, int priority,
                   const RequestOptions& options);
  void answer(std::string text);  // the pending question succeeded with this answer
  void drop_question();           // the pending question failed
  // Words in the prompt that body() built last (the EPP's and the simulator's token count).
  int64_t last_prompt_words() const { return last_prompt_words_; }
  std::size_t turns() const { return history_.size() / 2; }

 private:
  std::string system_;
  std::vector<std::string> history_;  // question, answer, question, answer, ...
  std::string pending_;
  int64_t last_prompt_words_ = 0;
};

// Reads one response. Streaming: feed each SSE `data:` payload with the time it arrived.
// Whole response: feed the body once.
class ResponseAccumulator {
 public:
  void on_event(std::string_view data, double t_ms);
  void on_body(std::string_view body, double t_ms);

  bool done() const { return done_; }  // [DONE] seen (stream) or a valid body parsed
  const std::string& finish_reason() const { return finish_reason_; }
  const std::string& text() const { return text_; }
  int64_t content_chunks() const { return chunks_; }
  double first_content_ms() const { return first_content_ms_; }  // -1 until content arrived
  double last_content_ms() const { return last_content_ms_; }
  std::optional<int64_t> prompt_tokens() const { return prompt_tokens_; }
  std::optional<int64_t> completion_tokens() const { return completion_tokens_; }
  std::optional<int64_t> cached_tokens() const { return cached_tokens_; }
  const std::string& error() const { return error_; }  // malformed chunk or error object
  int64_t events() const { return events_; }
  bool usage_after_finish() const { return usage_after_finish_; }

 private:
  void on_json(std::string_view json, double t_ms, bool whole);

  bool done_ = false;
  bool finish_seen_ = false;
  bool usage_after_finish_ = false;
  std::string finish_reason_;
  std::string text_;
  int64_t chunks_ = 0;
  int64_t events_ = 0;
  double first_content_ms_ = -1;
  double last_content_ms_ = -1;
  std::optional<int64_t> prompt_tokens_;
  std::optional<int64_t> completion_tokens_;
  std::optional<int64_t> cached_tokens_;
  std::string error_;
};

}  // namespace llmd::loadclient
