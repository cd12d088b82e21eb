#include "epp/scheduler/profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <spdlog/spdlog.h>

#include "epp/scheduler/metrics.h"
#include "epp/scheduler/profile_trace.h"

namespace llmd::epp {
namespace {

using Clock = std::chrono::steady_clock;

// The scorer's output as the profile sums it: NaN counts 0, the rest is clamped to [0, 1].
double clamped(double score) {
  return std::isnan(score) ? 0.0 : std::clamp(score, 0.0, 1.0);
}

}  // namespace

Profile::Profile(std::string name, std::vector<Stage<Filter>> filters,
                 std::vector<ScorerStage> scorers, Stage<Picker> picker)
    : name_(std::move(name)),
      filters_(std::move(filters)),
      scorers_(std::move(scorers)),
      picker_(std::move(picker)) {}

ProfileResult Profile::run(CycleContext& ctx, std::vector<Endpoint> endpoints,
                           DecisionExplanation* explain) const {
  ProfileTrace trace(name_, ctx, explain);
  trace.candidates(endpoints);
  ProfileResult result;
  for (const auto& f : filters_) {
    if (endpoints.empty()) {
      break;
    }
    endpoints = run_filter(f, ctx, std::move(endpoints), trace);
    if (endpoints.empty()) {
      result.emptied_by = f.plugin->name();
    }
  }
  if (endpoints.empty()) {
    return result;
  }
  std::vector<double> total(endpoints.size(), 0.0);
  trace.begin_scoring(endpoints, scorers_.size());
  for (const auto& s : scorers_) {
    add_scores(s, ctx, endpoints, total, trace);
  }
  result.picked = run_picker(ctx, endpoints, total, trace);
  result.candidates = std::move(endpoints);
  result.scores = std::move(total);
  return result;
}

std::vector<Endpoint> Profile::run_filter(const Stage<Filter>& f, CycleContext& ctx,
                                          std::vector<Endpoint> endpoints,
                                          ProfileTrace& trace) const {
  const std::size_t before = endpoints.size();
  trace.before_filter(endpoints);
  const auto start = Clock::now();
  endpoints = f.plugin->filter(ctx, std::move(endpoints));
  observe_since(f.duration, start);
  trace.after_filter(*f.plugin, before, endpoints);
  return endpoints;
}

void Profile::add_scores(const ScorerStage& s, CycleContext& ctx,
                         const std::vector<Endpoint>& endpoints, std::vector<double>& total,
                         ProfileTrace& trace) const {
  trace.scorer(*s.plugin, s.weight);
  trace.before_plugin();
  const auto start = Clock::now();
  const std::vector<double> scores = s.plugin->score(ctx, endpoints);
  observe_since(s.duration, start);
  trace.after_plugin(*s.plugin);
  if (scores.size() != endpoints.size()) {
    // A plugin bug, not a request error: its opinion is dropped, the request goes on.
    spdlog::error("scorer {} ({}) returned {} scores for {} endpoints; ignored", s.plugin->name(),
                  s.plugin->type(), scores.size(), endpoints.size());
    return;
  }
  for (std::size_t i = 0; i < scores.size(); ++i) {
    const double c = clamped(scores[i]);
    total[i] += s.weight * c;
    trace.score(*s.plugin, s.weight, endpoints[i], i, c);
  }
}

std::size_t Profile::run_picker(CycleContext& ctx, std::vector<Endpoint>& endpoints,
                                const std::vector<double>& total, ProfileTrace& trace) const {
  std::vector<ScoredEndpoint> scored;
  scored.reserve(endpoints.size());
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    scored.push_back({&endpoints[i], total[i]});
  }
  trace.before_plugin();
  const auto start = Clock::now();
  std::size_t pick = picker_.plugin->pick(ctx, scored);
  observe_since(picker_.duration, start);
  trace.after_plugin(*picker_.plugin);
  if (pick >= endpoints.size()) {
    spdlog::error("picker {} ({}) returned index {} of {}; using 0", picker_.plugin->name(),
                  picker_.plugin->type(), pick, endpoints.size());
    pick = 0;
  }
  trace.picked(*picker_.plugin, endpoints, total, pick);
  return pick;
}

}  // namespace llmd::epp
