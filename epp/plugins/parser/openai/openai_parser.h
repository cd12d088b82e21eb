#pragma once
// openai-parser: upstream's default request parser. Says that request bodies are OpenAI JSON,
// which is what this EPP reads (model, prompt or messages, stream, max_tokens, nvext hints);
// the proxy and the gateway port parse them. No parameters, as upstream. Immutable.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/scheduler/config_plugins.h"
#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class OpenAiParser final : public PluginBase<RequestParser> {
 public:
  static constexpr std::string_view kType = "openai-parser";

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle&) {
    if (auto e = ParamReader(params).finish(); !e.empty()) {
      return PluginOrError::fail(e);
    }
    return {std::make_shared<OpenAiParser>(name), {}};
  }
  explicit OpenAiParser(std::string name) : PluginBase(kType, std::move(name)) {}
};

}  // namespace llmd::epp
