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
  // Prompts in a completions batch (a list of strings or of token-id lists): each gets its own
  // choice. The engine simulates them as one sequence over all their tokens (an
  // approximation: vLLM runs one sequence per prompt).
  int prompts = 1;
  int64_t max_tokens = 0;
  bool stream = false;
  bool include_usage = false;
  int priority = 0;  // vLLM polarity (lower first)
};

// A request vLLM would refuse: HTTP status and the fields of an OpenAI error object.
struct ProtocolError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending request field; empty: null
  std::string code;   // e.g. "model_not_found"; empty: null
};

// Parses the JSON body of /v1/completions (chat = false) or /v1/chat/completions (chat = true).
// Prompt text -> tokens as the EPP counts them: completions' `prompt` words; chat: each
// message's text content followed by one space.
std::variant<InferenceRequest, ProtocolError> parse_inference_request(bool chat,
                                                                      std::string_view body,
                                                                      const ProtocolConfig& cfg);

// OpenAI's error object {"error": {"message", "type", "param", "code"}} (param and code a
// string or null), which the official SDKs parse into their exception. vLLM's legacy
// {"object": "error", ...} shape made the Node SDK report "(no body)".
http::Response error_response(const ProtocolError& error);
// type from the status: invalid_request_error (4xx), server_error (5xx).
http::Response error_response(int status, std::string message);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// Formats one response. Chunks are complete SSE events ("data: {json}\n\n").
class ResponseFormatter {
 public:
  // `choices`: one per prompt of a completions batch, all carrying the generated text.
  ResponseFormatter(bool chat, std::string id, int64_t created, std::string model, int choices = 1);

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
  Usage scaled(const Usage& usage) const;  // completion tokens of every choice
  std::string model_;
  int choices_;
};

}  // namespace llmd::modelsim
