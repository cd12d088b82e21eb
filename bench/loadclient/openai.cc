#include "bench/loadclient/openai.h"

#include <nlohmann/json.hpp>

namespace llmd::loadclient {

namespace {

using Json = nlohmann::json;

int64_t count_words(std::string_view text) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : text) {
    const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    if (space) {
      in_word = false;
    } else if (!in_word) {
      in_word = true;
      ++n;
    }
  }
  return n;
}

std::optional<int64_t> opt_int(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    return std::nullopt;
  }
  return it->get<int64_t>();
}

}  // namespace

std::optional<Api> parse_api(std::string_view name) {
  if (name == "completions") {
    return Api::kCompletions;
  }
  if (name == "chat") {
    return Api::kChat;
  }
  return std::nullopt;
}

std::string_view api_path(Api api) {
  return api == Api::kChat ? "/v1/chat/completions" : "/v1/completions";
}

void Conversation::reset(std::string system_prompt) {
  system_ = std::move(system_prompt);
  history_.clear();
  pending_.clear();
}

std::string Conversation::body(const std::string& question, int64_t max_tokens, int priority,
                               const RequestOptions& options) {
  pending_ = question;
  Json j;
  j["model"] = options.model;
  j["max_tokens"] = max_tokens;
  j["stream"] = options.stream;
  if (options.stream && options.include_usage) {
    j["stream_options"] = {{"include_usage", true}};
  }
  if (options.ignore_eos) {
    j["ignore_eos"] = true;
  }
  if (priority != 0) {
    j["nvext"] = {{"agent_hints", {{"priority", priority}}}};
    if (options.vllm_priority) {
      j["priority"] = -priority;
    }
  }
  if (options.api == Api::kChat) {
    Json messages = Json::array();
    int64_t words = 0;
    auto add = [&](const char* role, const std::string& content) {
      messages.push_back({{"role", role}, {"content", content}});
      words += count_words(content);
    };
    if (!system_.empty()) {
      add("system", system_);
    }
    for (std::size_t i = 0; i < history_.size(); ++i) {
      add(i % 2 == 0 ? "user" : "assistant", history_[i]);
    }
    add("user", question);
    j["messages"] = std::move(messages);
    last_prompt_words_ = words;
  } else {
    std::string prompt = system_;
    for (std::size_t i = 0; i < history_.size(); ++i) {
      // Answers arrive with their own leading space; questions need one.
      if (i % 2 == 0 && !prompt.empty()) {
        prompt += ' ';
      }
      prompt += history_[i];
    }
    if (!prompt.empty()) {
      prompt += ' ';
    }
    prompt += question;
    last_prompt_words_ = count_words(prompt);
    j["prompt"] = std::move(prompt);
  }
  return j.dump();
}

void Conversation::answer(std::string text) {
  history_.push_back(std::move(pending_));
  history_.push_back(std::move(text));
  pending_.clear();
}

void Conversation::drop_question() {
  pending_.clear();
}

void ResponseAccumulator::on_event(std::string_view data, double t_ms) {
  ++events_;
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  on_json(data, t_ms, false);
}

void ResponseAccumulator::on_body(std::string_view body, double t_ms) {
  on_json(body, t_ms, true);
}

void ResponseAccumulator::on_json(std::string_view data, double t_ms, bool whole) {
  Json j = Json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    if (error_.empty()) {
      error_ = "malformed JSON in response";
    }
    return;
  }
  if (auto err = j.find("error"); err != j.end() || j.value("object", "") == "error") {
    const Json& e = err != j.end() ? *err : j;
    error_ = e.is_object() ? e.value("message", "error object in response") : "error in response";
    return;
  }
  if (auto choices = j.find("choices"); choices != j.end() && choices->is_array()) {
    for (const auto& c : *choices) {
      std::string piece;
      if (auto t = c.find("text"); t != c.end() && t->is_string()) {
        piece = t->get<std::string>();
      } else if (auto d = c.find("delta"); d != c.end() && d->is_object()) {
        if (auto ct = d->find("content"); ct != d->end() && ct->is_string()) {
          piece = ct->get<std::string>();
        }
      } else if (auto m = c.find("message"); m != c.end() && m->is_object()) {
        if (auto ct = m->find("content"); ct != m->end() && ct->is_string()) {
          piece = ct->get<std::string>();
        }
      }
      if (!piece.empty()) {
        if (first_content_ms_ < 0) {
          first_content_ms_ = t_ms;
        }
        last_content_ms_ = t_ms;
        ++chunks_;
        text_ += piece;
      }
      if (auto f = c.find("finish_reason"); f != c.end() && f->is_string()) {
        finish_reason_ = f->get<std::string>();
        finish_seen_ = true;
      }
    }
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    prompt_tokens_ = opt_int(*u, "prompt_tokens");
    completion_tokens_ = opt_int(*u, "completion_tokens");
    if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object()) {
      cached_tokens_ = opt_int(*d, "cached_tokens");
    }
    usage_after_finish_ = finish_seen_;
  }
  if (whole) {
    done_ = finish_seen_;
    if (!done_ && error_.empty()) {
      error_ = "response has no finish_reason";
    }
  }
}

}  // namespace llmd::loadclient
