#include "epp/datastore/scrape_config.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace llmd::epp {
namespace {

bool name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool name_char(char c) {
  return name_start(c) || std::isdigit(static_cast<unsigned char>(c));
}

struct Cursor {
  std::string_view s;
  std::size_t i = 0;
  void skip_space() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
    }
  }
  bool eat(char c) {
    skip_space();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  std::string name(bool metric) {
    skip_space();
    const std::size_t start = i;
    if (i < s.size() && name_start(s[i]) && (metric || s[i] != ':')) {
      ++i;
      while (i < s.size() && name_char(s[i]) && (metric || s[i] != ':')) {
        ++i;
      }
    }
    return std::string(s.substr(start, i - start));
  }
  // A quoted value (\" and \\ escapes) or, as upstream accepts, an unquoted one.
  std::optional<std::string> value() {
    skip_space();
    std::string out;
    if (i < s.size() && s[i] == '"') {
      for (++i; i < s.size(); ++i) {
        if (s[i] == '"') {
          ++i;
          return out;
        }
        if (s[i] == '\\' && i + 1 < s.size()) {
          ++i;
        }
        out += s[i];
      }
      return std::nullopt;  // unterminated
    }
    while (i < s.size() && s[i] != '"' && s[i] != ',' && s[i] != '}' &&
           !std::isspace(static_cast<unsigned char>(s[i]))) {
      out += s[i++];
    }
    return out.empty() ? std::nullopt : std::optional<std::string>(out);
  }
};

MetricSpec spec(std::string name, std::vector<std::pair<std::string, std::string>> labels = {}) {
  return {std::move(name), std::move(labels)};
}

std::vector<EngineMapping> make_builtins() {
  EngineMapping vllm;
  vllm.engine = "vllm";
  vllm.queued = spec("vllm:num_requests_waiting");
  vllm.running = spec("vllm:num_requests_running");
  vllm.kv_usage = spec("vllm:kv_cache_usage_perc");
  vllm.kv_usage_fallback = spec("vllm:gpu_cache_usage_perc");
  vllm.lora = spec("vllm:lora_requests_info");
  vllm.cache_info = spec("vllm:cache_config_info");

  EngineMapping sglang;
  sglang.engine = "sglang";
  sglang.queued = spec("sglang:num_queue_reqs");
  sglang.running = spec("sglang:num_running_reqs");
  sglang.kv_usage = spec("sglang:token_usage");
  sglang.cache_info = spec("sglang:cache_config_info");
  sglang.block_size_label = "page_size";
  sglang.num_blocks_label = "num_pages";

  EngineMapping trtllm;
  trtllm.engine = "trtllm-serve";
  trtllm.queued = spec("trtllm_num_requests_waiting");
  trtllm.running = spec("trtllm_num_requests_running");
  trtllm.kv_usage = spec("trtllm_kv_cache_utilization");
  trtllm.block_size = spec("trtllm_kv_cache_tokens_per_block");
  trtllm.num_blocks = spec("trtllm_kv_cache_max_blocks");

  EngineMapping triton;
  triton.engine = "triton-tensorrt-llm";
  triton.queued = spec("nv_trt_llm_request_metrics", {{"request_type", "waiting"}});
  triton.running = spec("nv_trt_llm_request_metrics", {{"request_type", "scheduled"}});
  const std::string blocks = "nv_trt_llm_kv_cache_block_metrics";
  triton.kv_usage = spec(blocks, {{"kv_cache_block_type", "fraction"}});
  triton.block_size = spec(blocks, {{"kv_cache_block_type", "tokens_per"}});
  triton.num_blocks = spec(blocks, {{"kv_cache_block_type", "max"}});
  return {vllm, sglang, trtllm, triton};
}

}  // namespace

std::variant<MetricSpec, std::string> parse_metric_spec(std::string_view text) {
  Cursor c{text};
  MetricSpec out;
  out.name = c.name(true);
  auto bad = [&](const std::string& why) {
    return "metric spec '" + std::string(text) + "': " + why;
  };
  if (out.name.empty()) {
    return bad("expected a metric name");
  }
  if (c.eat('{')) {
    while (!c.eat('}')) {
      std::string label = c.name(false);
      if (label.empty()) {
        return bad("expected a label name or '}'");
      }
      c.skip_space();
      const auto op = c.s.substr(c.i, 2);
      if (op == "!=" || op == "=~" || op == "!~") {
        return bad("only label=value matchers are supported, not '" + std::string(op) + "'");
      }
      if (!c.eat('=')) {
        return bad("expected '=' after label '" + label + "'");
      }
      auto value = c.value();
      if (!value) {
        return bad("expected a value for label '" + label + "'");
      }
      out.labels.emplace_back(std::move(label), std::move(*value));
      if (!c.eat(',')) {
        if (!c.eat('}')) {
          return bad("expected ',' or '}'");
        }
        break;
      }
    }
  }
  c.skip_space();
  if (c.i != text.size()) {
    return bad("unexpected text after the selector");
  }
  std::sort(out.labels.begin(), out.labels.end());
  return out;
}

std::string to_string(const MetricSpec& spec) {
  std::string out = spec.name;
  if (!spec.labels.empty()) {
    out += '{';
    for (std::size_t i = 0; i < spec.labels.size(); ++i) {
      out += (i ? "," : "") + spec.labels[i].first + "=\"" + spec.labels[i].second + "\"";
    }
    out += '}';
  }
  return out;
}

const std::vector<EngineMapping>& builtin_engines() {
  static const std::vector<EngineMapping> engines = make_builtins();
  return engines;
}

const EngineMapping* builtin_engine(std::string_view engine) {
  for (const auto& m : builtin_engines()) {
    if (m.engine == engine) {
      return &m;
    }
  }
  return nullptr;
}

const EngineMapping* ScrapeConfig::mapping_for(
    const std::map<std::string, std::string>& labels) const {
  const EngineMapping* fallback = nullptr;
  const auto label = labels.find(engine_label_key);
  for (const auto& m : engines) {
    if (label != labels.end() && m.engine == label->second) {
      return &m;
    }
    if (m.engine == default_engine) {
      fallback = &m;
    }
  }
  return fallback;
}

std::string ScrapeConfig::validate() const {
  if (scheme != "http" && scheme != "https") {
    return "scheme must be http or https, got '" + scheme + "'";
  }
  std::set<std::string> names;
  for (const auto& m : engines) {
    if (m.engine.empty()) {
      return "an engine config has no name";
    }
    if (!names.insert(m.engine).second) {
      return "engine '" + m.engine + "' is configured twice";
    }
  }
  if (!names.count(default_engine)) {
    return "defaultEngine '" + default_engine + "' is not among the engines (" + [&] {
      std::string all;
      for (const auto& n : names) {
        all += (all.empty() ? "" : ", ") + n;
      }
      return all;
    }() + ")";
  }
  return {};
}

}  // namespace llmd::epp
