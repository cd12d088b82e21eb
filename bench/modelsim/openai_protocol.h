#pragma once
// The vLLM/OpenAI wire format of modelsim: request parsing and response/SSE formatting.
// Pure functions and values; no I/O, thread-safe.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "bench/sim/tokens.h"
#include "common/http/message.h"

namespace llmd::modelsim {

struct ProtocolConfig {
  std::string model_name = "meta-llama/Llama-3.1-8B-Instruct";
  int64_t default_max_tokens = 256;  // when the request gives none
};

struct InferenceRequest {
  bool chat = false;
  std::string model;
  std::vector<sim::TokenId> prompt_tokens;  // words of the prompt text (or given token ids)
  int64_t max_tokens = 0;
  bool stream = false;
  bool include_usage = false;
  int priority = 0;  // vLLM polarity (lower first)
};

// A request vLLM would refuse: HTTP status and an OpenAI-style error.
struct ProtocolError {
  int status = 400;
  std::string message;
  std::string type = "BadRequestError";
};

// Parses the JSON body of /v1/completions (chat = false) or /v1/chat/completions (chat = true).
// Prompt text -> tokens as the EPP counts them: completions' `prompt` words; chat: each
// message's text content followed by one space.
std::variant<InferenceRequest, ProtocolError> parse_inference_request(bool chat,
                                                                      std::string_view body,
                                                                      const ProtocolConfig& cfg);

// vLLM's error body: {"object":"error","message":...,"type":...,"param":null,"code":status}.
http::Response error_response(const ProtocolError& error);
inline http::Response error_response(int status, std::string message, std::string type) {
  return error_response(ProtocolError{status, std::move(message), std::move(type)});
}

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// Formats one response. Chunks are complete SSE events ("data: {json}\n\n").
class ResponseFormatter {
 public:
  ResponseFormatter(bool chat, std::string id, int64_t created, std::string model);

  const std::string& id() const { return id_; }
  // Chat streams open with a role chunk (delta {"role":"assistant","content":""}); empty for
  // completions.
  std::string role_chunk() const;
  // One generated token; the last one carries finish_reason "length".
  std::string token_chunk(std::string_view text, bool last) const;
  std::string usage_chunk(const Usage& usage) const;  // choices: [] + usage
  static std::string done_chunk() { return "data: [DONE]\n\n"; }
  // Non-streaming body with the whole text and usage.
  std::string full_response(std::string_view text, const Usage& usage) const;

 private:
  bool chat_;
  std::string id_;
  int64_t created_;
  std::string model_;
};

}  // namespace llmd::modelsim
