#pragma once
// The sampled decision log: for a sampled request, one line "decision {json}" (the
// DecisionExplanation, bounded to `max_candidates` pods) at info level. Bounded in two ways:
// a share of requests (`sample_rate`, drawn per request) and a line budget (a token bucket of
// `max_lines_per_second`, so a burst of sampled requests cannot flood the log); lines the
// budget refused are counted and reported by the next line written.
//
// Switchable at run time: configure() swaps the settings (the EPP calls it on start-up from
// its flags and on every config reload from the file's `decisionLog` section). With a rate of
// 0 (the default) sample() is one relaxed atomic load, and the SchedulingCycle builds nothing.
//
// Thread-safe: sample() and write() are called from every scheduling thread; the bucket is
// behind a mutex taken only for requests the rate already sampled.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "epp/scheduler/decision_explanation.h"

namespace prometheus {
class Counter;
class Registry;
}  // namespace prometheus

namespace llmd::epp {

struct DecisionLogConfig {
  double sample_rate = 0;            // share of requests logged, 0..1 (0 = off)
  double max_lines_per_second = 10;  // line budget (> 0); bursts up to one second's worth
  std::size_t max_candidates = 10;   // pods listed per line (the pick and the retry first)

  // "" or the first bad field and value.
  std::string validate() const;
  bool operator==(const DecisionLogConfig&) const = default;
};

class DecisionLog {
 public:
  using Sink = std::function<void(const std::string& line)>;
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;

  // `sink` empty: spdlog at info level. `registry` may be null (no metric). `now` empty: the
  // steady clock (tests inject one, so the budget is checked without sleeping).
  explicit DecisionLog(DecisionLogConfig config, Sink sink = {},
                       prometheus::Registry* registry = nullptr, Now now = {});

  void configure(const DecisionLogConfig& config);
  DecisionLogConfig config() const;

  // Whether this request's decision is logged: drawn with the sample rate, then within the
  // line budget (a sampled request the budget refuses is counted and not explained).
  bool sample();
  // Writes the line of a request sample() chose.
  void write(const DecisionExplanation& explanation);

  uint64_t written() const { return written_; }
  uint64_t rate_limited() const { return rate_limited_; }

 private:
  Sink sink_;
  Now now_;
  std::atomic<double> sample_rate_;
  mutable std::mutex mu_;
  DecisionLogConfig config_;              // guarded by mu_
  double tokens_ = 0;                     // guarded by mu_
  Clock::time_point refilled_;            // guarded by mu_
  uint64_t refused_since_last_line_ = 0;  // guarded by mu_
  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> rate_limited_{0};
  // llmd_epp_decision_log_lines_total{outcome="written|rate_limited"} (null: no registry)
  prometheus::Counter* written_metric_ = nullptr;
  prometheus::Counter* rate_limited_metric_ = nullptr;
};

}  // namespace llmd::epp
