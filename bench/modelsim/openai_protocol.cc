#include "bench/modelsim/openai_protocol.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/json/lax_bool.h"

namespace llmd::modelsim {

namespace {

using Json = nlohmann::ordered_json;  // keeps vLLM's key order on the wire

ProtocolError bad(std::string message, std::string param = {}) {
  return ProtocolError{400, std::move(message), "invalid_request_error", std::move(param), ""};
}

// Token ids of a prompt; false when one is not a non-negative integer.
bool append_ids(const nlohmann::json& ids, std::vector<sim::TokenId>& out) {
  for (const auto& t : ids) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0) {
      return false;
    }
    out.push_back(sim::hash_combine(0x746f6b656e6964ull, t.get<uint64_t>()));
  }
  return true;
}

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"completion_tokens", u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

// Text of a chat message's content: a string, or the "text" parts of a content array.
std::variant<std::string, ProtocolError> content_text(const nlohmann::json& content) {
  if (content.is_null()) {
    return std::string{};
  }
  if (content.is_string()) {
    return content.get<std::string>();
  }
  if (content.is_array()) {
    std::string out;
    for (const auto& part : content) {
      if (!part.is_object()) {
        return bad("messages: content parts must be objects", "messages");
      }
      if (part.value("type", "") == "text") {
        auto t = part.find("text");
        if (t == part.end() || !t->is_string()) {
          return bad("messages: a text part needs a string 'text'", "messages");
        }
        if (!out.empty()) {
          out += ' ';
        }
        out += t->get<std::string>();
      }
    }
    return out;
  }
  return bad("messages: content must be a string or an array of parts", "messages");
}

}  // namespace

std::variant<InferenceRequest, ProtocolError> parse_inference_request(bool chat,
                                                                      std::string_view body,
                                                                      const ProtocolConfig& cfg) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded()) {
    return bad("Invalid JSON in request body");
  }
  if (!j.is_object()) {
    return bad("The request body must be a JSON object");
  }
  InferenceRequest r;
  r.chat = chat;
  if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
    if (!m->is_string()) {
      return bad("'model' must be a string", "model");
    }
    r.model = m->get<std::string>();
    if (r.model != cfg.model_name) {
      return ProtocolError{404, "The model `" + r.model + "` does not exist.",
                           "invalid_request_error", "model", "model_not_found"};
    }
  } else {
    r.model = cfg.model_name;
  }
  if (chat) {
    auto msgs = j.find("messages");
    if (msgs == j.end() || !msgs->is_array() || msgs->empty()) {
      return bad("'messages' must be a non-empty array", "messages");
    }
    std::string text;
    for (const auto& msg : *msgs) {
      if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string()) {
        return bad("each message needs a string 'role'", "messages");
      }
      auto content = content_text(msg.contains("content") ? msg["content"] : nlohmann::json());
      if (auto* err = std::get_if<ProtocolError>(&content)) {
        return *err;
      }
      text += std::get<std::string>(content);
      text += ' ';
    }
    sim::tokenize(text, r.prompt_tokens);
  } else {
    auto p = j.find("prompt");
    if (p == j.end()) {
      return bad("'prompt' is required", "prompt");
    }
    // vLLM's forms: a string, a list of token ids, a list of strings, a list of token-id lists.
    const char* kShape =
        "'prompt' must be a string, a list of strings, a list of token ids or a list of token-id "
        "lists";
    if (p->is_string()) {
      sim::tokenize(p->get_ref<const std::string&>(), r.prompt_tokens);
    } else if (!p->is_array() || p->empty()) {
      return bad(kShape, "prompt");
    } else if ((*p)[0].is_number()) {
      if (!append_ids(*p, r.prompt_tokens)) {
        return bad("'prompt' token ids must be non-negative integers", "prompt");
      }
    } else {
      r.prompts = static_cast<int>(p->size());
      for (const auto& one : *p) {
        const std::size_t before = r.prompt_tokens.size();
        if (one.is_string()) {
          sim::tokenize(one.get_ref<const std::string&>(), r.prompt_tokens);
        } else if (!one.is_array() || one.empty() || !append_ids(one, r.prompt_tokens)) {
          return bad(kShape, "prompt");
        }
        if (r.prompt_tokens.size() == before) {
          return bad("The prompt is empty", "prompt");
        }
      }
    }
  }
  if (r.prompt_tokens.empty()) {
    return bad("The prompt is empty", chat ? "messages" : "prompt");
  }
  auto max_tokens = j.find("max_tokens");
  if (chat && (max_tokens == j.end() || max_tokens->is_null())) {
    max_tokens = j.find("max_completion_tokens");
  }
  if (max_tokens != j.end() && !max_tokens->is_null()) {
    if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1) {
      return bad("max_tokens must be an integer >= 1",
                 max_tokens.key() == "max_tokens" ? "max_tokens" : "max_completion_tokens");
    }
    r.max_tokens = max_tokens->get<int64_t>();
  } else {
    r.max_tokens = cfg.default_max_tokens;
  }
  // Booleans as vLLM's pydantic models read them (lax mode): "stream": "true" streams.
  if (auto s = j.find("stream"); s != j.end() && !s->is_null()) {
    const auto v = json::lax_bool(*s);
    if (!v) {
      return bad("'stream' must be a boolean", "stream");
    }
    r.stream = *v;
  }
  if (auto so = j.find("stream_options"); so != j.end() && !so->is_null()) {
    if (!r.stream) {
      return bad("Stream options can only be defined when `stream=True`.", "stream_options");
    }
    if (!so->is_object()) {
      return bad("'stream_options' must be an object", "stream_options");
    }
    if (auto iu = so->find("include_usage"); iu != so->end() && !iu->is_null()) {
      const auto v = json::lax_bool(*iu);
      if (!v) {
        return bad("'stream_options.include_usage' must be a boolean",
                   "stream_options.include_usage");
      }
      r.include_usage = *v;
    }
  }
  if (auto n = j.find("n"); n != j.end() && !n->is_null()) {
    if (!n->is_number_integer() || n->get<int64_t>() != 1) {
      return bad("only n = 1 is supported", "n");
    }
  }
  if (auto pr = j.find("priority"); pr != j.end() && !pr->is_null()) {
    if (!pr->is_number_integer()) {
      return bad("'priority' must be an integer", "priority");
    }
    const auto v = pr->get<int64_t>();
    if (v < -1'000'000 || v > 1'000'000) {
      return bad("'priority' out of range", "priority");
    }
    r.priority = static_cast<int>(v);
  }
  return r;
}

http::Response error_response(const ProtocolError& e) {
  auto or_null = [](const std::string& v) { return v.empty() ? Json(nullptr) : Json(v); };
  return http::Response::text(e.status,
                              Json{{"error",
                                    {{"message", e.message},
                                     {"type", e.type},
                                     {"param", or_null(e.param)},
                                     {"code", or_null(e.code)}}}}
                                  .dump(-1, ' ', false, Json::error_handler_t::replace),
                              "application/json");
}

http::Response error_response(int status, std::string message) {
  return error_response(ProtocolError{status, std::move(message),
                                      status >= 500 ? "server_error" : "invalid_request_error", "",
                                      ""});
}

ResponseFormatter::ResponseFormatter(bool chat, std::string id, int64_t created, std::string model,
                                     int choices)
    : chat_(chat),
      id_(std::move(id)),
      created_(created),
      model_(std::move(model)),
      choices_(std::max(1, choices)) {}

std::string ResponseFormatter::role_chunk() const {
  if (!chat_) {
    return {};
  }
  Json j{{"id", id_},
         {"object", "chat.completion.chunk"},
         {"created", created_},
         {"model", model_},
         {"choices", Json::array({Json{{"index", 0},
                                       {"delta", {{"role", "assistant"}, {"content", ""}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}})}};
  return "data: " + j.dump() + "\n\n";
}

std::string ResponseFormatter::token_chunk(std::string_view text, bool last) const {
  std::string out;
  for (int index = 0; index < choices_; ++index) {
    Json choice;
    choice["index"] = index;
    if (chat_) {
      choice["delta"] = {{"content", text}};
    } else {
      choice["text"] = text;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = last ? Json("length") : Json(nullptr);
    if (!chat_) {
      choice["stop_reason"] = nullptr;
    }
    Json j{{"id", id_},
           {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
           {"created", created_},
           {"model", model_},
           {"choices", Json::array({std::move(choice)})}};
    out += "data: " + j.dump() + "\n\n";
  }
  return out;
}

std::string ResponseFormatter::usage_chunk(const Usage& usage) const {
  Json j{{"id", id_},
         {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
         {"created", created_},
         {"model", model_},
         {"choices", Json::array()},
         {"usage", usage_json(scaled(usage))}};
  return "data: " + j.dump() + "\n\n";
}

std::string ResponseFormatter::full_response(std::string_view text, const Usage& usage) const {
  Json choices = Json::array();
  for (int index = 0; index < choices_; ++index) {
    Json choice;
    choice["index"] = index;
    if (chat_) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
      choice["text"] = text;
      choice["stop_reason"] = nullptr;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = "length";
    choices.push_back(std::move(choice));
  }
  Json j{{"id", id_},
         {"object", chat_ ? "chat.completion" : "text_completion"},
         {"created", created_},
         {"model", model_},
         {"choices", std::move(choices)},
         {"usage", usage_json(scaled(usage))}};
  return j.dump();
}

Usage ResponseFormatter::scaled(const Usage& usage) const {
  Usage u = usage;
  u.completion_tokens *= choices_;  // every choice carries the generated text
  return u;
}

}  // namespace llmd::modelsim
