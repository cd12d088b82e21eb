#pragma once
// Workload generator (simulator.md section 4): shared-prefix multi-turn sessions, length
// distributions, Poisson arrivals in stages. Seeded and reproducible: the same spec, options and
// seed give the same trace, and the lengths of request i do not depend on the arrival rates
// (lengths and arrivals use separate random streams), so traces of different ladders line up.
// Pure computation, no I/O; a Trace is immutable after generate() and safe to share.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmd::workload {

// A length in tokens: normal (clamped), lognormal with the given mean and std (heavy tail), or
// fixed (= mean). Samples are rounded and clamped to [min, max].
struct LengthDist {
  enum class Kind { kFixed, kNormal, kLogNormal };
  Kind kind = Kind::kNormal;
  double mean = 1;
  double std = 0;
  int64_t min = 1;
  int64_t max = 1 << 20;

  int64_t sample(std::mt19937_64& rng) const;
  LengthDist scaled(double factor) const;  // mean, std, max times factor (min kept)
};

struct Stage {
  double rate = 1;        // requests per second (> 0)
  double duration_s = 1;  // (> 0)
};
// "rate:duration,rate:duration" (seconds), e.g. "2:30,4:30". nullopt + message on error.
std::optional<std::vector<Stage>> parse_stages(std::string_view text, std::string* error);
std::string format_stages(const std::vector<Stage>& stages);

struct WorkloadSpec {
  std::string name;
  int64_t num_groups = 1;         // distinct shared system prompts
  int64_t prompts_per_group = 1;  // users (sessions) per group
  int64_t system_prompt_len = 0;  // tokens of each group's system prompt (0 = none)
  LengthDist question_len;
  LengthDist output_len;
  bool multi_turn = false;    // a user's next request continues its conversation
  bool shared_prefix = true;  // false: every request is a fresh single-turn user
  // A conversation whose next prompt + output would exceed this starts over (new session).
  int64_t max_context_tokens = 131072;
  std::vector<Stage> default_stages;  // the preset's ladder for one default pod
  std::string description;

  std::string validate() const;  // empty when valid
};

// Presets "A", "B", "C", "D", "sharegpt", "production" (case-sensitive); nullopt otherwise.
std::optional<WorkloadSpec> preset(std::string_view name);
std::vector<std::string> preset_names();

struct GenerateOptions {
  uint64_t seed = 1;
  std::vector<Stage> stages;          // empty: the spec's default_stages
  double rate_scale = 1.0;            // multiplies every stage rate
  double length_scale = 1.0;          // multiplies system, question and output lengths
  int64_t max_requests = 0;           // 0 = no cap; otherwise the trace stops after this many
  std::optional<double> slo_ttft_ms;  // adds x-slo-ttft-ms to every request
  std::optional<double> slo_tpot_ms;  // adds x-slo-tpot-ms
  double sheddable_fraction = 0;      // share of requests with priority -1 (sheddable)
  // Share of requests that carry the SLO headers above (drawn per request; 1 = every one).
  double slo_share = 1.0;
  // A second workload mixed into the same arrivals: each request belongs to it with
  // probability `mix_share` and then takes its lengths, users and system prompts (its groups
  // follow the first workload's, so the two never share a prefix).
  std::optional<WorkloadSpec> mix;
  double mix_share = 0;
};

struct TraceRequest {
  uint64_t index = 0;     // arrival order, 0-based
  double arrival_ms = 0;  // scheduled send time from the start of the run
  int stage = 0;
  uint64_t session = 0;        // conversation id; requests of one session run in order
  int64_t group = 0;           // which system prompt
  int64_t turn = 0;            // 0 = the conversation starts (history is empty)
  int64_t question_len = 0;    // tokens of this turn's new text
  uint64_t question_seed = 0;  // picks the words
  int64_t max_tokens = 1;      // output tokens requested
  int priority = 0;            // EPP polarity: < 0 is sheddable
  std::vector<std::pair<std::string, std::string>> headers;
};

struct Trace {
  WorkloadSpec spec;                     // after length scaling
  std::optional<WorkloadSpec> mix_spec;  // options.mix after length scaling
  GenerateOptions options;
  std::vector<Stage> stages;  // after rate scaling
  std::vector<TraceRequest> requests;

  // Words of a group's system prompt (empty when its workload has none).
  std::string system_prompt(int64_t group) const;
  // Words of a request's new question text.
  std::string question(const TraceRequest& r) const;
  double duration_ms() const;  // sum of the stage durations
};

// Throws std::invalid_argument on an invalid spec or options.
Trace generate(const WorkloadSpec& spec, const GenerateOptions& options);

// `n` pseudo-random lowercase words (3-8 letters) separated by single spaces, from `seed`.
std::string words(uint64_t seed, int64_t n);

}  // namespace llmd::workload
