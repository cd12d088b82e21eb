#include "epp/scheduler/profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "epp/scheduler/metrics.h"

namespace llmd::epp {
namespace {

std::string names(const std::vector<Endpoint>& endpoints) {
  std::string out;
  for (const auto& e : endpoints) {
    out += (out.empty() ? "" : ", ") + e.name();
  }
  return out;
}

bool debug_on() { return spdlog::should_log(spdlog::level::debug); }

// The explanation's candidates by name, for a cycle that is explained: pointers into
// explain.candidates, which keeps its size while the profile runs.
using CandidatesByName = std::unordered_map<std::string_view, CandidateDecision*>;

CandidatesByName index_candidates(DecisionExplanation& explain) {
  CandidatesByName out;
  out.reserve(explain.candidates.size());
  for (auto& c : explain.candidates) {
    out.emplace(c.name, &c);
  }
  return out;
}

// What filter `f` removed: the candidates of `before` that `after` no longer holds.
void record_filter(DecisionExplanation& explain, const CandidatesByName& by_name,
                   const Stage<Filter>& f, const std::vector<CandidateDecision*>& before,
                   const std::vector<Endpoint>& after) {
  std::vector<char> kept(explain.candidates.size(), 0);  // by index into explain.candidates
  for (const auto& e : after) {
    if (auto it = by_name.find(e.name()); it != by_name.end()) {
      kept[static_cast<std::size_t>(it->second - explain.candidates.data())] = 1;
    }
  }
  FilterDecision step{f.plugin->name(), std::string(f.plugin->type()), before.size(), {}};
  for (CandidateDecision* c : before) {
    if (kept[static_cast<std::size_t>(c - explain.candidates.data())] == 0) {
      step.removed.push_back(c->name);
      c->removed_by = f.plugin->name();
    }
  }
  explain.filters.push_back(std::move(step));
}

// Prefixes the tie-break notes `plugin` added since `from` with its instance name and moves them
// into the explanation.
void take_tie_breaks(DecisionExplanation& explain, DecisionNotes& notes, std::size_t from,
                     const Plugin& plugin) {
  for (std::size_t i = from; i < notes.tie_breaks.size(); ++i) {
    explain.tie_breaks.push_back(plugin.name() + ": " + std::move(notes.tie_breaks[i]));
  }
  notes.tie_breaks.resize(from);
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
  const CandidatesByName by_name =
      explain != nullptr ? index_candidates(*explain) : CandidatesByName{};
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
    std::vector<CandidateDecision*> explained_before;
    if (explain != nullptr) {
      explained_before.reserve(endpoints.size());
      for (const auto& e : endpoints) {
        if (auto it = by_name.find(e.name()); it != by_name.end()) {
          explained_before.push_back(it->second);
        }
      }
    }
    endpoints = f.plugin->filter(ctx, std::move(endpoints));
    observe_since(f.duration, start);
    if (explain != nullptr) {
      record_filter(*explain, by_name, f, explained_before, endpoints);
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
  // When explaining: each endpoint's entry, which gets every scorer's clamped output (an
  // ignored scorer counts 0) and the total.
  std::vector<CandidateDecision*> explained;
  if (explain != nullptr) {
    explained.reserve(endpoints.size());
    for (const auto& e : endpoints) {
      auto it = by_name.find(e.name());
      explained.push_back(it == by_name.end() ? nullptr : it->second);
      if (explained.back() != nullptr) {
        explained.back()->scorer_scores.reserve(scorers_.size());
      }
    }
  }
  for (const auto& s : scorers_) {
    if (explain != nullptr) {
      explain->scorers.push_back({s.plugin->name(), std::string(s.plugin->type()), s.weight});
      for (auto* c : explained) {
        if (c != nullptr) {
          c->scorer_scores.push_back(0.0);
        }
      }
    }
    const std::size_t notes_before = ctx.notes ? ctx.notes->tie_breaks.size() : 0;
    auto start = Clock::now();
    std::vector<double> scores = s.plugin->score(ctx, endpoints);
    observe_since(s.duration, start);
    if (explain != nullptr && ctx.notes != nullptr) {
      take_tie_breaks(*explain, *ctx.notes, notes_before, *s.plugin);
    }
    if (scores.size() != endpoints.size()) {
      // A plugin bug, not a request error: its opinion is dropped, the request goes on.
      spdlog::error("scorer {} ({}) returned {} scores for {} endpoints; ignored",
                    s.plugin->name(), s.plugin->type(), scores.size(), endpoints.size());
      continue;
    }
    for (std::size_t i = 0; i < scores.size(); ++i) {
      double clamped = std::isnan(scores[i]) ? 0.0 : std::clamp(scores[i], 0.0, 1.0);
      total[i] += s.weight * clamped;
      if (explain != nullptr && explained[i] != nullptr) {
        explained[i]->scorer_scores.back() = clamped;
      }
      if (debug_on()) {
        spdlog::debug("profile {} scorer {} ({}) x{}: {} = {:.4f}", name_, s.plugin->name(),
                      s.plugin->type(), s.weight, endpoints[i].name(), clamped);
      }
    }
  }

  std::vector<ScoredEndpoint> scored;
  scored.reserve(endpoints.size());
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    scored.push_back({&endpoints[i], total[i]});
  }
  const std::size_t notes_before = ctx.notes ? ctx.notes->tie_breaks.size() : 0;
  auto start = Clock::now();
  std::size_t pick = picker_.plugin->pick(ctx, scored);
  observe_since(picker_.duration, start);
  if (explain != nullptr && ctx.notes != nullptr) {
    take_tie_breaks(*explain, *ctx.notes, notes_before, *picker_.plugin);
  }
  if (pick >= endpoints.size()) {
    spdlog::error("picker {} ({}) returned index {} of {}; using 0", picker_.plugin->name(),
                  picker_.plugin->type(), pick, endpoints.size());
    pick = 0;
  }
  if (explain != nullptr) {
    explain->picker = picker_.plugin->name();
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
      if (explained[i] != nullptr) {
        explained[i]->score = total[i];
      }
    }
  }
  if (debug_on()) {
    std::string line;
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
      line += fmt::format("{}{}={:.4f}", i == 0 ? "" : ", ", endpoints[i].name(), total[i]);
    }
    spdlog::debug("profile {} picker {} ({}): scores [{}] -> {} ({})", name_,
                  picker_.plugin->name(), picker_.plugin->type(), line, endpoints[pick].name(),
                  endpoints[pick].address());
  }
  result.candidates = std::move(endpoints);
  result.scores = std::move(total);
  result.picked = pick;
  return result;
}

}  // namespace llmd::epp
