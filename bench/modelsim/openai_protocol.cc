#include "bench/modelsim/openai_protocol.h"

#include <nlohmann/json.hpp>

namespace llmd::modelsim {

namespace {

using Json = nlohmann::ordered_json;  // keeps vLLM's key order on the wire

ProtocolError bad(std::string message) { return ProtocolError{400, std::move(message), "BadRequestError"}; }

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
        return bad("messages: content parts must be objects");
      }
      if (part.value("type", "") == "text") {
        auto t = part.find("text");
        if (t == part.end() || !t->is_string()) {
          return bad("messages: a text part needs a string 'text'");
        }
        if (!out.empty()) {
          out += ' ';
        }
        out += t->get<std::string>();
      }
    }
    return out;
  }
  return bad("messages: content must be a string or an array of parts");
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
      return bad("'model' must be a string");
    }
    r.model = m->get<std::string>();
    if (r.model != cfg.model_name) {
      return ProtocolError{404, "The model `" + r.model + "` does not exist.", "NotFoundError"};
    }
  } else {
    r.model = cfg.model_name;
  }
  if (chat) {
    auto msgs = j.find("messages");
    if (msgs == j.end() || !msgs->is_array() || msgs->empty()) {
      return bad("'messages' must be a non-empty array");
    }
    std::string text;
    for (const auto& msg : *msgs) {
      if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string()) {
        return bad("each message needs a string 'role'");
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
      return bad("'prompt' is required");
    }
    if (p->is_string()) {
      sim::tokenize(p->get_ref<const std::string&>(), r.prompt_tokens);
    } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
      sim::tokenize((*p)[0].get_ref<const std::string&>(), r.prompt_tokens);
    } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
      for (const auto& t : *p) {
        if (!t.is_number_integer()) {
          return bad("'prompt' token ids must be integers");
        }
        r.prompt_tokens.push_back(sim::hash_combine(0x746f6b656e6964ull, t.get<uint64_t>()));
      }
    } else {
      return bad("'prompt' must be a string, a one-string array or an array of token ids");
    }
  }
  if (r.prompt_tokens.empty()) {
    return bad("The prompt is empty");
  }
  auto max_tokens = j.find("max_tokens");
  if (chat && (max_tokens == j.end() || max_tokens->is_null())) {
    max_tokens = j.find("max_completion_tokens");
  }
  if (max_tokens != j.end() && !max_tokens->is_null()) {
    if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1) {
      return bad("max_tokens must be an integer >= 1");
    }
    r.max_tokens = max_tokens->get<int64_t>();
  } else {
    r.max_tokens = cfg.default_max_tokens;
  }
  if (auto s = j.find("stream"); s != j.end() && !s->is_null()) {
    if (!s->is_boolean()) {
      return bad("'stream' must be a boolean");
    }
    r.stream = s->get<bool>();
  }
  if (auto so = j.find("stream_options"); so != j.end() && !so->is_null()) {
    if (!r.stream) {
      return bad("Stream options can only be defined when `stream=True`.");
    }
    if (!so->is_object()) {
      return bad("'stream_options' must be an object");
    }
    if (auto iu = so->find("include_usage"); iu != so->end() && !iu->is_null()) {
      if (!iu->is_boolean()) {
        return bad("'stream_options.include_usage' must be a boolean");
      }
      r.include_usage = iu->get<bool>();
    }
  }
  if (auto n = j.find("n"); n != j.end() && !n->is_null()) {
    if (!n->is_number_integer() || n->get<int64_t>() != 1) {
      return bad("only n = 1 is supported");
    }
  }
  if (auto pr = j.find("priority"); pr != j.end() && !pr->is_null()) {
    if (!pr->is_number_integer()) {
      return bad("'priority' must be an integer");
    }
    const auto v = pr->get<int64_t>();
    if (v < -1'000'000 || v > 1'000'000) {
      return bad("'priority' out of range");
    }
    r.priority = static_cast<int>(v);
  }
  return r;
}

http::Response error_response(const ProtocolError& e) {
  return http::Response::text(e.status,
                             Json{{"object", "error"},
                                  {"message", e.message},
                                  {"type", e.type},
                                  {"param", nullptr},
                                  {"code", e.status}}
                                 .dump(),
                             "application/json");
}

ResponseFormatter::ResponseFormatter(bool chat, std::string id, int64_t created, std::string model)
    : chat_(chat), id_(std::move(id)), created_(created), model_(std::move(model)) {}

std::string ResponseFormatter::role_chunk() const {
  if (!chat_) {
    return {};
  }
  Json j{{"id", id_},
         {"object", "chat.completion.chunk"},
         {"created", created_},
         {"model", model_},
         {"choices",
          Json::array({Json{{"index", 0},
                            {"delta", {{"role", "assistant"}, {"content", ""}}},
                            {"logprobs", nullptr},
                            {"finish_reason", nullptr}}})}};
  return "data: " + j.dump() + "\n\n";
}

std::string ResponseFormatter::token_chunk(std::string_view text, bool last) const {
  Json choice;
  choice["index"] = 0;
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
  return "data: " + j.dump() + "\n\n";
}

std::string ResponseFormatter::usage_chunk(const Usage& usage) const {
  Json j{{"id", id_},
         {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
         {"created", created_},
         {"model", model_},
         {"choices", Json::array()},
         {"usage", usage_json(usage)}};
  return "data: " + j.dump() + "\n\n";
}

std::string ResponseFormatter::full_response(std::string_view text, const Usage& usage) const {
  Json choice;
  choice["index"] = 0;
  if (chat_) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
    choice["stop_reason"] = nullptr;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = "length";
  Json j{{"id", id_},
         {"object", chat_ ? "chat.completion" : "text_completion"},
         {"created", created_},
         {"model", model_},
         {"choices", Json::array({std::move(choice)})},
         {"usage", usage_json(usage)}};
  return j.dump();
}

}  // namespace llmd::modelsim
