#include "epp/datastore/metrics_parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>

namespace llmd::epp {
namespace {

std::optional<double> value_of(std::string_view line) {
  auto sp = line.rfind(' ');
  if (sp == std::string_view::npos) {
    return std::nullopt;
  }
  std::string v(line.substr(sp + 1));
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str()) {
    return std::nullopt;
  }
  return d;
}

std::optional<int64_t> label_of(std::string_view line, std::string_view label) {
  std::string needle = std::string(label) + "=\"";
  auto pos = line.find(needle);
  if (pos == std::string_view::npos) {
    return std::nullopt;
  }
  pos += needle.size();
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(line.data() + pos, line.data() + line.size(), v);
  if (ec != std::errc()) {
    return std::nullopt;
  }
  return v;
}

// A string label's value with Prometheus' escapes (\\, \", \n) undone.
std::optional<std::string> string_label(std::string_view line, std::string_view label) {
  const std::string needle = std::string(label) + "=\"";
  auto pos = line.find(needle);
  if (pos == std::string_view::npos) {
    return std::nullopt;
  }
  std::string out;
  for (pos += needle.size(); pos < line.size(); ++pos) {
    char c = line[pos];
    if (c == '"') {
      return out;
    }
    if (c == '\\' && pos + 1 < line.size()) {
      c = line[++pos] == 'n' ? '\n' : line[pos];
    }
    out += c;
  }
  return std::nullopt;  // unterminated
}

bool is_metric(std::string_view line, std::string_view name) {
  return line.starts_with(name) && line.size() > name.size() &&
         (line[name.size()] == '{' || line[name.size()] == ' ');
}

}  // namespace

std::optional<PodMetrics> parse_vllm_metrics(std::string_view text) {
  PodMetrics m;
  std::optional<double> waiting, running, kv, gpu_kv;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty() || line[0] == '#') {
      continue;
    }
    if (is_metric(line, "vllm:num_requests_waiting")) {
      waiting = value_of(line);
    } else if (is_metric(line, "vllm:num_requests_running")) {
      running = value_of(line);
      if (auto model = string_label(line, "model_name");
          model && !model->empty() &&
          std::find(m.models.begin(), m.models.end(), *model) == m.models.end()) {
        m.models.push_back(std::move(*model));
      }
    } else if (is_metric(line, "vllm:kv_cache_usage_perc")) {
      kv = value_of(line);
    } else if (is_metric(line, "vllm:gpu_cache_usage_perc")) {
      gpu_kv = value_of(line);
    } else if (is_metric(line, "vllm:cache_config_info")) {
      if (auto b = label_of(line, "block_size"); b && *b > 0) {
        m.block_size = *b;
      }
      if (auto n = label_of(line, "num_gpu_blocks"); n && *n > 0) {
        m.num_gpu_blocks = *n;
      }
    }
  }
  if (!waiting || !running || (!kv && !gpu_kv)) {
    return std::nullopt;
  }
  m.waiting = static_cast<int64_t>(*waiting);
  m.running = static_cast<int64_t>(*running);
  m.kv_cache_usage = kv ? *kv : *gpu_kv;
  return m;
}

}  // namespace llmd::epp
