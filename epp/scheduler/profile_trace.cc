#include "epp/scheduler/profile_trace.h"

#include <spdlog/spdlog.h>

namespace llmd::epp {
namespace {

std::string names(const std::vector<Endpoint>& endpoints) {
  std::string out;
  for (const auto& e : endpoints) {
    out += (out.empty() ? "" : ", ") + e.name();
  }
  return out;
}

}  // namespace

ProfileTrace::ProfileTrace(const std::string& profile, CycleContext& ctx,
                           DecisionExplanation* explain)
    : profile_(profile),
      ctx_(ctx),
      explain_(explain),
      debug_(spdlog::should_log(spdlog::level::debug)) {
  if (explain_ != nullptr) {
    by_name_.reserve(explain_->candidates.size());
    for (auto& c : explain_->candidates) {
      by_name_.emplace(c.name, &c);
    }
  }
}

CandidateDecision* ProfileTrace::find(const Endpoint& e) const {
  auto it = by_name_.find(e.name());
  return it == by_name_.end() ? nullptr : it->second;
}

void ProfileTrace::candidates(const std::vector<Endpoint>& endpoints) const {
  if (debug_) {
    spdlog::debug("profile {} request {}: candidates [{}]", profile_, ctx_.request.request_id,
                  names(endpoints));
  }
}

void ProfileTrace::before_filter(const std::vector<Endpoint>& endpoints) {
  explained_.clear();
  if (explain_ == nullptr) {
    return;
  }
  for (const auto& e : endpoints) {
    if (CandidateDecision* c = find(e)) {
      explained_.push_back(c);
    }
  }
}

void ProfileTrace::after_filter(const Plugin& filter, std::size_t before,
                                const std::vector<Endpoint>& endpoints) {
  if (explain_ != nullptr) {
    std::vector<char> kept(explain_->candidates.size(), 0);  // by index into candidates
    for (const auto& e : endpoints) {
      if (CandidateDecision* c = find(e)) {
        kept[static_cast<std::size_t>(c - explain_->candidates.data())] = 1;
      }
    }
    FilterDecision step{filter.name(), std::string(filter.type()), explained_.size(), {}};
    for (CandidateDecision* c : explained_) {
      if (kept[static_cast<std::size_t>(c - explain_->candidates.data())] == 0) {
        step.removed.push_back(c->name);
        c->removed_by = filter.name();
      }
    }
    explain_->filters.push_back(std::move(step));
  }
  if (debug_) {
    spdlog::debug("profile {} filter {} ({}): kept {}/{} [{}]", profile_, filter.name(),
                  filter.type(), endpoints.size(), before, names(endpoints));
  }
}

void ProfileTrace::before_plugin() {
  notes_before_ = ctx_.notes != nullptr ? ctx_.notes->tie_breaks.size() : 0;
}

void ProfileTrace::after_plugin(const Plugin& plugin) {
  if (explain_ == nullptr || ctx_.notes == nullptr) {
    return;
  }
  auto& notes = ctx_.notes->tie_breaks;
  for (std::size_t i = notes_before_; i < notes.size(); ++i) {
    explain_->tie_breaks.push_back(plugin.name() + ": " + std::move(notes[i]));
  }
  notes.resize(notes_before_);
}

void ProfileTrace::begin_scoring(const std::vector<Endpoint>& endpoints, std::size_t scorers) {
  explained_.clear();
  if (explain_ == nullptr) {
    return;
  }
  for (const auto& e : endpoints) {
    explained_.push_back(find(e));
    if (explained_.back() != nullptr) {
      explained_.back()->scorer_scores.reserve(scorers);
    }
  }
}

void ProfileTrace::scorer(const Plugin& scorer, double weight) {
  if (explain_ == nullptr) {
    return;
  }
  explain_->scorers.push_back({scorer.name(), std::string(scorer.type()), weight});
  for (auto* c : explained_) {
    if (c != nullptr) {
      c->scorer_scores.push_back(0.0);  // an ignored scorer counts 0
    }
  }
}

void ProfileTrace::score(const Plugin& scorer, double weight, const Endpoint& endpoint,
                         std::size_t i, double clamped) {
  if (explain_ != nullptr && explained_[i] != nullptr) {
    explained_[i]->scorer_scores.back() = clamped;
  }
  if (debug_) {
    spdlog::debug("profile {} scorer {} ({}) x{}: {} = {:.4f}", profile_, scorer.name(),
                  scorer.type(), weight, endpoint.name(), clamped);
  }
}

void ProfileTrace::picked(const Plugin& picker, const std::vector<Endpoint>& endpoints,
                          const std::vector<double>& totals, std::size_t pick) const {
  if (explain_ != nullptr) {
    explain_->picker = picker.name();
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
      if (CandidateDecision* c = find(endpoints[i])) {
        c->score = totals[i];
      }
    }
  }
  if (debug_) {
    std::string line;
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
      line += fmt::format("{}{}={:.4f}", i == 0 ? "" : ", ", endpoints[i].name(), totals[i]);
    }
    spdlog::debug("profile {} picker {} ({}): scores [{}] -> {} ({})", profile_, picker.name(),
                  picker.type(), line, endpoints[pick].name(), endpoints[pick].address());
  }
}

}  // namespace llmd::epp
