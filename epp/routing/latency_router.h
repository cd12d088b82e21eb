#pragma once
// Model-level latency-based routing (seed 002, spec epp.md section 5). A request whose model
// (and subject/metadata, when the rule gives them) matches a rule goes to one of the rule's
// targets, a pool or an upstream URL; unmatched requests are the caller's business (default
// pool).
//
// Each (rule id, target) keeps the response times of its last `windowRequests` requests; a read
// at `now` ignores those older than `now - window`. So the average covers "the last 20 minutes
// or the last 100 requests, whichever holds fewer". A target with fewer than `minSamples` such
// samples is unjudged. Candidates are the unjudged targets plus the judged ones whose average is
// <= fastFactor x the fastest judged average; one is drawn uniformly. Consequences:
//  - warm-up: new targets get random traffic until they have minSamples samples;
//  - a target that slows down past fastFactor x the fastest drops out;
//  - recovery: a dropped target gets no traffic, so its samples age out after `window`, it
//    becomes unjudged again and gets traffic, which re-measures it.
// A failed request counts as max(response time, failurePenaltyMs).
#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "epp/interface/rng.h"
#include "epp/routing/load_balancing_config.h"

namespace llmd::epp::routing {

using Clock = std::chrono::steady_clock;

struct RouteQuery {
  std::string_view model;
  std::string_view subject;                                      // header x-subject; "" = none
  const std::map<std::string, std::string>* metadata = nullptr;  // x-metadata; null = none
};

// The first rule in config order that matches, or null. Pure.
const LatencyRule* match_rule(const LoadBalancingConfig& config, const RouteQuery& q);

// Response times of one (rule, target), oldest first. Not thread-safe; LatencyRouter locks.
class SampleWindow {
 public:
  struct Summary {
    std::size_t samples = 0;
    double average_ms = 0;  // 0 when there are no samples
  };
  // Keeps at most `cap` samples; also drops expired ones from the front.
  void add(Clock::time_point at, double ms, std::size_t cap, Clock::time_point cutoff);
  // Over the samples taken at or after `cutoff`.
  Summary summary(Clock::time_point cutoff) const;
  void trim(std::size_t cap);

 private:
  struct Sample {
    Clock::time_point at;
    double ms;
  };
  std::deque<Sample> samples_;
};

// Thread-safe: route(), record(), status(), reconfigure() and config() may be called from any
// thread. One mutex guards the config snapshot and the windows; no I/O or allocation-heavy work
// is done under it.
class LatencyRouter {
 public:
  explicit LatencyRouter(LoadBalancingConfig config);

  struct Decision {
    std::string rule_id;
    std::size_t target_index;  // into the rule's targets
    LoadBalanceTarget target;
    bool warm_up;  // the picked target is unjudged
  };
  // Nullopt when no rule matches. Draws exactly one rng.uniform() when a rule matches.
  std::optional<Decision> route(const RouteQuery& q, Rng& rng, Clock::time_point now);

  // The outcome of a request routed by route(). Pairs that no longer exist (the config was
  // reloaded meanwhile) and non-finite times are ignored.
  void record(const std::string& rule_id, const std::string& target, double response_ms,
              bool success, Clock::time_point now);

  struct TargetStatus {
    std::string rule_id, target;
    std::size_t samples;
    double average_ms;
    bool judged, fast;  // fast: judged and a candidate
  };
  // Every target of every rule, in config order; for metrics and logs.
  std::vector<TargetStatus> status(Clock::time_point now) const;

  // Statistics of (rule id, target) pairs present in both configs are kept.
  void reconfigure(LoadBalancingConfig config);
  // A snapshot; it stays valid and unchanged across later reconfigure() calls.
  std::shared_ptr<const LoadBalancingConfig> config() const;

 private:
  struct Assessment {
    SampleWindow::Summary summary;
    bool judged = false;
    bool candidate = false;
  };
  std::vector<Assessment> assess(std::size_t rule, Clock::time_point now) const;

  mutable std::mutex mu_;
  std::shared_ptr<const LoadBalancingConfig> config_;        // guarded by mu_
  std::vector<std::vector<SampleWindow>> windows_;           // [rule][target], guarded by mu_
  std::unordered_map<std::string, std::size_t> rule_index_;  // id -> rule, guarded by mu_
};

}  // namespace llmd::epp::routing
