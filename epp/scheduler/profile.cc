#include "epp/scheduler/profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string_view>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "epp/scheduler/metrics.h"

namespace llmd::epp {
namespace {

std::string names(const std::vector<Endpoint>& endpoints) {
  std::string out;
  for (const auto& e : endpoints) {
    out += (out.empty() ? "" : ", ") + e.name;
  }
  return out;
}

bool debug_on() { return spdlog::should_log(spdlog::level::debug); }

CandidateDecision* find_candidate(DecisionExplanation& explain, const std::string& name) {
  for (auto& c : explain.candidates) {
    if (c.name == name) {
      return &c;
    }
  }
  return nullptr;
}

// What filter `f` removed: the names of `before` that `after` no longer holds.
void record_filter(DecisionExplanation& explain, const Stage<Filter>& f,
                   const std::vector<std::string>& before, const std::vector<Endpoint>& after) {
  std::unordered_set<std::string_view> kept;
  for (const auto& e : after) {
    kept.insert(e.name);
  }
  FilterDecision step{f.plugin->name(), std::string(f.plugin->type()), before.size(), {}};
  for (const auto& name : before) {
    if (!kept.contains(name)) {
      step.removed.push_back(name);
      if (auto* c = find_candidate(explain, name)) {
        c->removed_by = f.plugin->name();
      }
    }
  }
  explain.filters.push_back(std::move(step));
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
  using Clock = std::chrono::steady_clock;
  ProfileResult result;
  if (debug_on()) {
    spdlog::debug("profile {} request {}: candidates [{}]", name_, ctx.request.request_id,
                  names(endpoints));
  }
  for (const auto& f : filters_) {
    if (endpoints.empty()) {
      break;
    }
    auto start = Clock::now();
    std::size_t before = endpoints.size();
    std::vector<std::string> names_before;
    if (explain != nullptr) {
      names_before.reserve(endpoints.size());
      for (const auto& e : endpoints) {
        names_before.push_back(e.name);
      }
    }
    endpoints = f.plugin->filter(ctx, std::move(endpoints));
    observe_since(f.duration, start);
    if (explain != nullptr) {
      record_filter(*explain, f, names_before, endpoints);
    }
    if (debug_on()) {
      spdlog::debug("profile {} filter {} ({}): kept {}/{} [{}]", name_, f.plugin->name(),
                    f.plugin->type(), endpoints.size(), before, names(endpoints));
    }
    if (endpoints.empty()) {
      result.emptied_by = f.plugin->name();
    }
  }
  if (endpoints.empty()) {
    return result;
  }

  std::vector<double> total(endpoints.size(), 0.0);
  // Per endpoint, each scorer's clamped output (an ignored scorer counts 0), when explaining.
  std::vector<std::vector<double>> parts(explain != nullptr ? endpoints.size() : 0);
  for (const auto& s : scorers_) {
    if (explain != nullptr) {
      explain->scorers.push_back({s.plugin->name(), std::string(s.plugin->type()), s.weight});
      for (auto& p : parts) {
        p.push_back(0.0);
      }
    }
    auto start = Clock::now();
    std::vector<double> scores = s.plugin->score(ctx, endpoints);
    observe_since(s.duration, start);
    if (scores.size() != endpoints.size()) {
      // A plugin bug, not a request error: its opinion is dropped, the request goes on.
      spdlog::error("scorer {} ({}) returned {} scores for {} endpoints; ignored",
                    s.plugin->name(), s.plugin->type(), scores.size(), endpoints.size());
      continue;
    }
    for (std::size_t i = 0; i < scores.size(); ++i) {
      double clamped = std::isnan(scores[i]) ? 0.0 : std::clamp(scores[i], 0.0, 1.0);
      total[i] += s.weight * clamped;
      if (explain != nullptr) {
        parts[i].back() = clamped;
      }
      if (debug_on()) {
        spdlog::debug("profile {} scorer {} ({}) x{}: {} = {:.4f}", name_, s.plugin->name(),
                      s.plugin->type(), s.weight, endpoints[i].name, clamped);
      }
    }
  }

  std::vector<ScoredEndpoint> scored;
  scored.reserve(endpoints.size());
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    scored.push_back({&endpoints[i], total[i]});
  }
  auto start = Clock::now();
  std::size_t pick = picker_.plugin->pick(ctx, scored);
  observe_since(picker_.duration, start);
  if (pick >= endpoints.size()) {
    spdlog::error("picker {} ({}) returned index {} of {}; using 0", picker_.plugin->name(),
                  picker_.plugin->type(), pick, endpoints.size());
    pick = 0;
  }
  if (explain != nullptr) {
    explain->picker = picker_.plugin->name();
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
      if (auto* c = find_candidate(*explain, endpoints[i].name)) {
        c->score = total[i];
        c->scorer_scores = std::move(parts[i]);
      }
    }
  }
  if (debug_on()) {
    std::string line;
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
      line += fmt::format("{}{}={:.4f}", i == 0 ? "" : ", ", endpoints[i].name, total[i]);
    }
    spdlog::debug("profile {} picker {} ({}): scores [{}] -> {} ({})", name_,
                  picker_.plugin->name(), picker_.plugin->type(), line, endpoints[pick].name,
                  endpoints[pick].address);
  }
  result.candidates = std::move(endpoints);
  result.scores = std::move(total);
  result.picked = pick;
  return result;
}

}  // namespace llmd::epp
