#include "epp/datastore/metrics_parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace llmd::epp {
namespace {

std::optional<double> number(std::string_view v) {
  if (v.starts_with('+')) {
    v.remove_prefix(1);  // "+Inf"; from_chars takes no sign but '-'
  }
  double d = 0;
  if (auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), d); ec == std::errc()) {
    return d;
  }
  // What from_chars does not read (a value out of range, odd spellings) goes to strtod, which
  // the parser used before: rare, so its copy does not matter.
  std::string copy(v);
  char* end = nullptr;
  d = std::strtod(copy.c_str(), &end);
  if (end == copy.c_str()) {
    return std::nullopt;
  }
  return d;
}

std::optional<double> value_of(std::string_view line) {
  auto sp = line.rfind(' ');
  if (sp == std::string_view::npos) {
    return std::nullopt;
  }
  return number(line.substr(sp + 1));
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

// One sample line: `name{labels} value [timestamp]`.
struct Sample {
  std::string_view name;
  std::vector<std::pair<std::string, std::string>> labels;
  std::optional<double> value;
  const std::string* label(std::string_view key) const {
    for (const auto& [k, v] : labels) {
      if (k == key) {
        return &v;
      }
    }
    return nullptr;
  }
};

std::string_view sample_name(std::string_view line) {
  const auto end = line.find_first_of("{ \t");
  return line.substr(0, end == std::string_view::npos ? line.size() : end);
}

std::optional<Sample> parse_sample(std::string_view line) {
  Sample s;
  s.name = sample_name(line);
  std::size_t i = s.name.size();
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const auto eq = line.find('=', i);
      if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
        return std::nullopt;
      }
      std::string key(line.substr(i, eq - i)), value;
      for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
        char c = line[i];
        if (c == '\\' && i + 1 < line.size()) {
          c = line[++i] == 'n' ? '\n' : line[i];
        }
        value += c;
      }
      if (i >= line.size()) {
        return std::nullopt;  // unterminated
      }
      ++i;  // the closing quote
      if (i < line.size() && line[i] == ',') {
        ++i;
      }
      s.labels.emplace_back(std::move(key), std::move(value));
    }
    ++i;  // '}'
  }
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) {
    ++i;
  }
  const auto end = line.find_first_of(" \t\r", i);
  s.value = number(line.substr(i, end == std::string_view::npos ? end : end - i));
  return s;
}

bool matches(const MetricSpec& spec, const Sample& s) {
  if (spec.name != s.name) {
    return false;
  }
  return std::all_of(spec.labels.begin(), spec.labels.end(), [&](const auto& kv) {
    const std::string* v = s.label(kv.first);
    return v != nullptr && *v == kv.second;
  });
}

std::optional<int64_t> positive(std::optional<double> v) {
  if (!v || !(*v >= 1) || *v > 9.0e15) {
    return std::nullopt;
  }
  return static_cast<int64_t>(*v);
}

std::optional<int64_t> integer_label(const Sample& s, const std::string& key) {
  const std::string* v = s.label(key);
  if (v == nullptr) {
    return std::nullopt;
  }
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || n <= 0) {
    return std::nullopt;
  }
  return n;
}

bool is_metric(std::string_view line, std::string_view name) {
  return line.starts_with(name) && line.size() > name.size() &&
         (line[name.size()] == '{' || line[name.size()] == ' ');
}

}  // namespace

std::optional<PodMetrics> parse_vllm_metrics(std::string_view text) {
  // A real pod's answer is ~40 KB, ~400 lines, of which five are read: a line is skipped on
  // its first bytes (comments, python_ and process_ metrics by the first, the vLLM families
  // not read by the sixth), so a scrape costs about one memchr over the body: 5.6 us instead
  // of 20 (bench/metrics_parse_bench).
  PodMetrics m;
  std::optional<double> waiting, running, kv, gpu_kv;
  const char* p = text.data();
  const char* const end = p + text.size();
  while (p < end) {
    const auto* nl =
        static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
    if (nl == nullptr) {
      nl = end;
    }
    const std::string_view line(p, static_cast<std::size_t>(nl - p));
    p = nl + 1;
    constexpr std::string_view kPrefix = "vllm:";
    if (line.size() <= kPrefix.size() || line[0] != 'v' || !line.starts_with(kPrefix)) {
      continue;
    }
    switch (line[kPrefix.size()]) {
      case 'n':
      case 'k':
      case 'g':
      case 'c':
        break;
      default:
        continue;  // time_*, e2e_*, request_*, iteration_*, prompt_*, prefix_*, ...
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

std::optional<PodMetrics> parse_engine_metrics(std::string_view text,
                                               const EngineMapping& mapping) {
  if (const EngineMapping* vllm = builtin_engine("vllm"); vllm != nullptr && mapping == *vllm) {
    return parse_vllm_metrics(text);
  }
  // The gauges read, by slot; found[] holds each slot's first matching sample's value.
  enum Slot { kQueued, kRunning, kKv, kKvFallback, kCacheInfo, kBlockSize, kNumBlocks, kSlots };
  const std::optional<MetricSpec>* slots[kSlots] = {
      &mapping.queued,     &mapping.running,    &mapping.kv_usage,  &mapping.kv_usage_fallback,
      &mapping.cache_info, &mapping.block_size, &mapping.num_blocks};
  std::optional<double> found[kSlots];
  PodMetrics m;
  const char* p = text.data();
  const char* const end = p + text.size();
  while (p < end) {
    const auto* nl =
        static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
    if (nl == nullptr) {
      nl = end;
    }
    const std::string_view line(p, static_cast<std::size_t>(nl - p));
    p = nl + 1;
    if (line.empty() || line[0] == '#') {
      continue;
    }
    const std::string_view name = sample_name(line);
    if (std::none_of(std::begin(slots), std::end(slots), [&](const auto* slot) {
          return slot->has_value() && (*slot)->name == name;
        })) {
      continue;
    }
    const auto sample = parse_sample(line);
    if (!sample) {
      continue;
    }
    for (int k = 0; k < kSlots; ++k) {
      if (!slots[k]->has_value() || !matches(**slots[k], *sample)) {
        continue;
      }
      if (k == kRunning) {
        if (const std::string* model = sample->label("model_name");
            model != nullptr && !model->empty() &&
            std::find(m.models.begin(), m.models.end(), *model) == m.models.end()) {
          m.models.push_back(*model);
        }
      }
      if (found[k] || !sample->value) {
        continue;  // the first sample wins (upstream's choice among untimestamped samples)
      }
      found[k] = sample->value;
      if (k == kCacheInfo) {
        if (auto b = integer_label(*sample, mapping.block_size_label)) {
          m.block_size = *b;
        }
        if (auto n = integer_label(*sample, mapping.num_blocks_label)) {
          m.num_gpu_blocks = *n;
        }
      }
    }
  }
  if ((mapping.queued && !found[kQueued]) || (mapping.running && !found[kRunning]) ||
      (mapping.kv_usage && !found[kKv] && !found[kKvFallback])) {
    return std::nullopt;
  }
  m.waiting = static_cast<int64_t>(found[kQueued].value_or(0));
  m.running = static_cast<int64_t>(found[kRunning].value_or(0));
  m.kv_cache_usage = found[kKv] ? *found[kKv] : found[kKvFallback].value_or(0);
  if (auto b = positive(found[kBlockSize])) {
    m.block_size = *b;
  }
  if (auto n = positive(found[kNumBlocks])) {
    m.num_gpu_blocks = *n;
  }
  return m;
}

}  // namespace llmd::epp
