#include "bench/workload/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace llmd::workload {

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t mix2(uint64_t a, uint64_t b) {
  return mix(a ^ mix(b + 0x632be59bd9b4e019ull));
}

LengthDist normal(double mean, double std, int64_t max = 1 << 20) {
  return LengthDist{LengthDist::Kind::kNormal, mean, std, 1, max};
}

LengthDist lognormal(double mean, double std, int64_t max) {
  return LengthDist{LengthDist::Kind::kLogNormal, mean, std, 1, max};
}

std::vector<Stage> ladder(std::initializer_list<double> rates, double duration_s) {
  std::vector<Stage> out;
  for (double r : rates) {
    out.push_back({r, duration_s});
  }
  return out;
}

WorkloadSpec shared_prefix(std::string name, int64_t groups, int64_t users, int64_t system,
                           double q_mean, std::string description) {
  WorkloadSpec s;
  s.name = std::move(name);
  s.num_groups = groups;
  s.prompts_per_group = users;
  s.system_prompt_len = system;
  s.question_len = normal(q_mean, 0.3 * q_mean);
  s.output_len = normal(1000, 300);
  s.multi_turn = true;
  s.default_stages = ladder({0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4}, 60);
  s.description = std::move(description);
  return s;
}

}  // namespace

int64_t LengthDist::sample(std::mt19937_64& rng) const {
  double v = mean;
  switch (kind) {
    case Kind::kFixed:
      break;
    case Kind::kNormal:
      if (std > 0) {
        v = std::normal_distribution<double>(mean, std)(rng);
      }
      break;
    case Kind::kLogNormal: {
      const double cv = std / mean;
      const double sigma2 = std::log1p(cv * cv);
      const double mu = std::log(mean) - sigma2 / 2;
      v = std::lognormal_distribution<double>(mu, std::sqrt(sigma2))(rng);
      break;
    }
  }
  if (!std::isfinite(v)) {
    v = static_cast<double>(max);
  }
  const auto n = static_cast<int64_t>(std::llround(std::clamp(v, -1e15, 1e15)));
  return std::clamp(n, min, std::max(min, max));
}

LengthDist LengthDist::scaled(double factor) const {
  LengthDist d = *this;
  d.mean = std::max(1.0, mean * factor);
  d.std = std * factor;
  d.max = std::max(min, static_cast<int64_t>(std::llround(static_cast<double>(max) * factor)));
  return d;
}

std::optional<std::vector<Stage>> parse_stages(std::string_view text, std::string* error) {
  std::vector<Stage> out;
  auto fail = [&](const std::string& msg) -> std::optional<std::vector<Stage>> {
    if (error != nullptr) {
      *error = msg;
    }
    return std::nullopt;
  };
  std::string s(text);
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      return fail("stage '" + item + "' is not rate:duration");
    }
    try {
      std::size_t used = 0;
      const std::string rate_s = item.substr(0, colon);
      const std::string dur_s = item.substr(colon + 1);
      const double rate = std::stod(rate_s, &used);
      if (used != rate_s.size()) {
        return fail("bad rate in stage '" + item + "'");
      }
      const double dur = std::stod(dur_s, &used);
      if (used != dur_s.size()) {
        return fail("bad duration in stage '" + item + "'");
      }
      if (!(rate > 0 && rate <= 1e6) || !(dur > 0 && dur <= 86400)) {
        return fail("stage '" + item + "' needs 0 < rate <= 1e6 and 0 < duration <= 86400");
      }
      out.push_back({rate, dur});
    } catch (const std::exception&) {
      return fail("bad number in stage '" + item + "'");
    }
  }
  if (out.empty()) {
    return fail("no stages given");
  }
  return out;
}

std::string format_stages(const std::vector<Stage>& stages) {
  std::string out;
  char buf[64];
  for (const auto& st : stages) {
    std::snprintf(buf, sizeof(buf), "%s%g:%g", out.empty() ? "" : ",", st.rate, st.duration_s);
    out += buf;
  }
  return out;
}

std::string WorkloadSpec::validate() const {
  if (num_groups < 1 || prompts_per_group < 1) {
    return "num_groups and prompts_per_group must be >= 1";
  }
  if (system_prompt_len < 0) {
    return "system_prompt_len must be >= 0";
  }
  if (!(question_len.mean >= 1) || !(output_len.mean >= 1)) {
    return "question_len and output_len means must be >= 1";
  }
  if (max_context_tokens < system_prompt_len + 2) {
    return "max_context_tokens must exceed the system prompt";
  }
  return {};
}

std::optional<WorkloadSpec> preset(std::string_view name) {
  if (name == "A") {
    return shared_prefix("A", 6, 1000, 1000, 30, "6 groups x 1000 users, short questions");
  }
  if (name == "B") {
    return shared_prefix("B", 6, 1000, 1000, 3000, "6 groups x 1000 users, long questions");
  }
  if (name == "C") {
    return shared_prefix("C", 150, 5, 6000, 1200, "150 groups x 5 users, long system prompts");
  }
  if (name == "D") {
    return shared_prefix("D", 150, 5, 1000, 6200, "150 groups x 5 users, very long questions");
  }
  if (name == "sharegpt") {
    WorkloadSpec s;
    s.name = "sharegpt";
    s.shared_prefix = false;
    // Lognormal with median ~100 (sigma 1.0) and ~200 (sigma 0.9), like ShareGPT conversations.
    s.question_len = lognormal(165, 216, 4096);
    s.output_len = lognormal(300, 316, 2048);
    s.default_stages = ladder({2, 4, 6, 8, 10, 12, 14, 16}, 60);
    s.description = "no shared prefix, heavy-tailed single-turn lengths";
    return s;
  }
  if (name == "production") {
    WorkloadSpec s;
    s.name = "production";
    s.num_groups = 10;
    s.prompts_per_group = 100;
    s.system_prompt_len = 1000;
    s.question_len = lognormal(729, 13550, 131072);
    s.output_len = lognormal(300, 2213, 8192);
    s.multi_turn = true;
    s.default_stages = ladder({1, 5, 1, 5, 1, 5, 1, 5}, 60);
    s.description =
        "1000-token system prompts with high reuse, heavy-tailed lengths, "
        "alternating low/high load";
    return s;
  }
  return std::nullopt;
}

std::vector<std::string> preset_names() {
  return {"A", "B", "C", "D", "sharegpt", "production"};
}

std::string words(uint64_t seed, int64_t n) {
  std::string out;
  out.reserve(static_cast<std::size_t>(std::max<int64_t>(0, n)) * 6);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t h = mix2(seed, static_cast<uint64_t>(i));
    const int len = 3 + static_cast<int>(h % 6);
    h /= 6;
    if (i > 0) {
      out += ' ';
    }
    for (int c = 0; c < len; ++c) {
      out += static_cast<char>('a' + h % 26);
      h /= 26;
    }
  }
  return out;
}

std::string Trace::system_prompt(int64_t group) const {
  const int64_t len =
      mix_spec && group >= spec.num_groups ? mix_spec->system_prompt_len : spec.system_prompt_len;
  if (len <= 0) {
    return {};
  }
  return words(mix2(options.seed, 0x5157454d00000000ull + static_cast<uint64_t>(group)), len);
}

std::string Trace::question(const TraceRequest& r) const {
  return words(r.question_seed, r.question_len);
}

double Trace::duration_ms() const {
  double d = 0;
  for (const auto& s : stages) {
    d += s.duration_s * 1000.0;
  }
  return d;
}

Trace generate(const WorkloadSpec& input_spec, const GenerateOptions& options) {
  if (auto err = input_spec.validate(); !err.empty()) {
    throw std::invalid_argument("workload " + input_spec.name + ": " + err);
  }
  if (!(options.length_scale > 0) || !(options.rate_scale > 0)) {
    throw std::invalid_argument("length_scale and rate_scale must be > 0");
  }
  if (!(options.sheddable_fraction >= 0 && options.sheddable_fraction <= 1)) {
    throw std::invalid_argument("sheddable_fraction must be in [0, 1]");
  }
  if (!(options.slo_share >= 0 && options.slo_share <= 1) ||
      !(options.mix_share >= 0 && options.mix_share <= 1)) {
    throw std::invalid_argument("slo_share and mix_share must be in [0, 1]");
  }
  if (options.mix) {
    if (auto err = options.mix->validate(); !err.empty()) {
      throw std::invalid_argument("workload " + options.mix->name + ": " + err);
    }
  }
  Trace trace;
  trace.options = options;
  trace.spec = input_spec;
  trace.mix_spec = options.mix;
  auto scale = [&](WorkloadSpec& spec) {
    if (options.length_scale == 1.0) {
      return;
    }
    if (spec.system_prompt_len > 0) {
      spec.system_prompt_len = std::max<int64_t>(
          1, std::llround(static_cast<double>(spec.system_prompt_len) * options.length_scale));
    }
    spec.question_len = spec.question_len.scaled(options.length_scale);
    spec.output_len = spec.output_len.scaled(options.length_scale);
  };
  scale(trace.spec);
  if (trace.mix_spec) {
    scale(*trace.mix_spec);
  }
  const WorkloadSpec& first = trace.spec;
  trace.stages = options.stages.empty() ? first.default_stages : options.stages;
  if (trace.stages.empty()) {
    throw std::invalid_argument("workload " + first.name + ": no stages");
  }
  for (auto& st : trace.stages) {
    st.rate *= options.rate_scale;
    if (!(st.rate > 0) || !(st.duration_s > 0)) {
      throw std::invalid_argument("stages need rate > 0 and duration > 0");
    }
  }

  // Independent streams: arrivals, lengths/content, per-request policy (priority).
  std::mt19937_64 arrivals(mix2(options.seed, 1));
  std::mt19937_64 content(mix2(options.seed, 2));
  std::mt19937_64 policy(mix2(options.seed, 3));
  // Only consulted when asked for, so traces without a mix or an SLO share are unchanged.
  std::mt19937_64 mixing(mix2(options.seed, 4));
  std::mt19937_64 slo(mix2(options.seed, 5));

  struct User {
    uint64_t session = 0;
    int64_t turn = 0;
    int64_t context = 0;  // estimated tokens of the conversation so far
    bool started = false;
  };
  std::unordered_map<uint64_t, User> users;
  const int64_t first_users = first.num_groups * first.prompts_per_group;
  uint64_t next_session = 0;

  double stage_start = 0;
  uint64_t index = 0;
  for (std::size_t si = 0; si < trace.stages.size(); ++si) {
    const auto& st = trace.stages[si];
    std::exponential_distribution<double> gap(st.rate / 1000.0);
    const double stage_end = stage_start + st.duration_s * 1000.0;
    double t = stage_start + gap(arrivals);
    while (t < stage_end) {
      if (options.max_requests > 0 && static_cast<int64_t>(index) >= options.max_requests) {
        break;
      }
      TraceRequest r;
      r.index = index;
      r.arrival_ms = t;
      r.stage = static_cast<int>(si);
      r.question_seed = mix2(options.seed ^ 0x7155u, index);
      const bool mixed = trace.mix_spec && options.mix_share > 0 &&
                         std::uniform_real_distribution<double>(0, 1)(mixing) < options.mix_share;
      const WorkloadSpec& spec = mixed ? *trace.mix_spec : first;
      int64_t question = spec.question_len.sample(content);
      r.max_tokens = spec.output_len.sample(content);
      const int64_t num_users = spec.num_groups * spec.prompts_per_group;
      int64_t user_pick = std::uniform_int_distribution<int64_t>(0, num_users - 1)(content);
      if (!spec.shared_prefix) {
        r.session = next_session++;
        r.group = mixed ? first.num_groups : 0;
        r.turn = 0;
      } else {
        r.group = user_pick / spec.prompts_per_group + (mixed ? first.num_groups : 0);
        user_pick += mixed ? first_users : 0;
        User& u = users[static_cast<uint64_t>(user_pick)];
        const int64_t base = u.started && spec.multi_turn ? u.context : spec.system_prompt_len;
        if (!u.started || !spec.multi_turn ||
            base + question + r.max_tokens > spec.max_context_tokens) {
          u.session = next_session++;
          u.turn = 0;
          u.context = spec.system_prompt_len;
          u.started = true;
        } else {
          ++u.turn;
        }
        r.session = u.session;
        r.turn = u.turn;
        u.context += question + r.max_tokens;
      }
      // Keep system + history + question + output inside the context limit.
      question = std::min(
          question,
          std::max<int64_t>(1, spec.max_context_tokens - spec.system_prompt_len - r.max_tokens));
      r.question_len = question;
      if (std::uniform_real_distribution<double>(0, 1)(policy) < options.sheddable_fraction) {
        r.priority = -1;
      }
      const bool with_slo = options.slo_share >= 1 ||
                            std::uniform_real_distribution<double>(0, 1)(slo) < options.slo_share;
      if (options.slo_ttft_ms && with_slo) {
        r.headers.emplace_back("x-slo-ttft-ms", std::to_string(*options.slo_ttft_ms));
      }
      if (options.slo_tpot_ms && with_slo) {
        r.headers.emplace_back("x-slo-tpot-ms", std::to_string(*options.slo_tpot_ms));
      }
      trace.requests.push_back(std::move(r));
      ++index;
      t += gap(arrivals);
    }
    stage_start = stage_end;
  }
  return trace;
}

}  // namespace llmd::workload
