#include "epp/routing/latency_router.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace llmd::epp::routing {

namespace {

bool contains(const std::vector<std::string>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

bool matches(const RuleCondition& when, const RouteQuery& q) {
  if (!contains(when.models, q.model)) {
    return false;
  }
  if (!when.subjects.empty() && (q.subject.empty() || !contains(when.subjects, q.subject))) {
    return false;
  }
  for (const auto& [key, value] : when.metadata) {
    if (q.metadata == nullptr) {
      return false;
    }
    auto it = q.metadata->find(key);
    if (it == q.metadata->end() || it->second != value) {
      return false;
    }
  }
  return true;
}

std::vector<std::vector<SampleWindow>> empty_windows(const LoadBalancingConfig& config) {
  std::vector<std::vector<SampleWindow>> windows;
  for (const auto& rule : config.rules) {
    windows.emplace_back(rule.targets.size());
  }
  return windows;
}

std::unordered_map<std::string, std::size_t> index_rules(const LoadBalancingConfig& config) {
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < config.rules.size(); ++i) {
    index.emplace(config.rules[i].id, i);
  }
  return index;
}

std::size_t find_target(const LatencyRule& rule, const std::string& target) {
  for (std::size_t i = 0; i < rule.targets.size(); ++i) {
    if (rule.targets[i].target == target) {
      return i;
    }
  }
  return rule.targets.size();
}

}  // namespace

const LatencyRule* match_rule(const LoadBalancingConfig& config, const RouteQuery& q) {
  for (const auto& rule : config.rules) {
    if (matches(rule.when, q)) {
      return &rule;
    }
  }
  return nullptr;
}

void SampleWindow::add(Clock::time_point at, double ms, std::size_t cap, Clock::time_point cutoff) {
  samples_.push_back({at, ms});
  while (!samples_.empty() && (samples_.size() > cap || samples_.front().at < cutoff)) {
    samples_.pop_front();
  }
}

SampleWindow::Summary SampleWindow::summary(Clock::time_point cutoff) const {
  // Filter rather than stop at the first fresh sample: concurrent recorders may append
  // slightly out of time order.
  Summary s;
  double sum = 0;
  for (const auto& sample : samples_) {
    if (sample.at >= cutoff) {
      ++s.samples;
      sum += sample.ms;
    }
  }
  s.average_ms = s.samples == 0 ? 0 : sum / static_cast<double>(s.samples);
  return s;
}

void SampleWindow::trim(std::size_t cap) {
  while (samples_.size() > cap) {
    samples_.pop_front();
  }
}

LatencyRouter::LatencyRouter(LoadBalancingConfig config)
    : windows_(empty_windows(config)), rule_index_(index_rules(config)) {
  config_ = std::make_shared<const LoadBalancingConfig>(std::move(config));
}

std::vector<LatencyRouter::Assessment> LatencyRouter::assess(std::size_t rule,
                                                             Clock::time_point now) const {
  const auto& settings = config_->settings;
  const auto& windows = windows_[rule];
  std::vector<Assessment> out(windows.size());
  double fastest = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < windows.size(); ++i) {
    out[i].summary = windows[i].summary(now - settings.window);
    out[i].judged = out[i].summary.samples >= settings.min_samples;
    if (out[i].judged) {
      fastest = std::min(fastest, out[i].summary.average_ms);
    }
  }
  for (auto& a : out) {
    a.candidate = !a.judged || a.summary.average_ms <= settings.fast_factor * fastest;
  }
  return out;
}

std::optional<LatencyRouter::Decision> LatencyRouter::route(const RouteQuery& q, Rng& rng,
                                                            Clock::time_point now) {
  std::shared_ptr<const LoadBalancingConfig> config;
  std::size_t rule = 0;
  std::size_t picked = 0;
  bool warm_up = false;
  {
    std::lock_guard lock(mu_);
    const LatencyRule* matched = match_rule(*config_, q);
    if (matched == nullptr) {
      return std::nullopt;
    }
    config = config_;
    rule = static_cast<std::size_t>(matched - config_->rules.data());
    auto assessed = assess(rule, now);
    std::size_t candidates = static_cast<std::size_t>(
        std::count_if(assessed.begin(), assessed.end(), [](const auto& a) { return a.candidate; }));
    // The fastest judged target is always a candidate, so candidates >= 1.
    auto nth = std::min(candidates - 1,
                        static_cast<std::size_t>(rng.uniform() * static_cast<double>(candidates)));
    for (std::size_t seen = 0; picked < assessed.size(); ++picked) {
      if (assessed[picked].candidate && seen++ == nth) {
        break;
      }
    }
    warm_up = !assessed[picked].judged;
  }
  // Copy out of the snapshot after unlocking: override_params may be a sizeable JSON object.
  const LatencyRule& r = config->rules[rule];
  return Decision{r.id, picked, r.targets[picked], warm_up};
}

void LatencyRouter::record(const std::string& rule_id, const std::string& target,
                           double response_ms, bool success, Clock::time_point now) {
  if (!std::isfinite(response_ms)) {
    return;
  }
  std::lock_guard lock(mu_);
  auto it = rule_index_.find(rule_id);
  if (it == rule_index_.end()) {
    return;
  }
  const LatencyRule& rule = config_->rules[it->second];
  std::size_t t = find_target(rule, target);
  if (t == rule.targets.size()) {
    return;
  }
  const auto& settings = config_->settings;
  // A failure that took longer than the penalty must not look better than its real time.
  double ms =
      success ? std::max(0.0, response_ms) : std::max(response_ms, settings.failure_penalty_ms);
  windows_[it->second][t].add(now, ms, settings.window_requests, now - settings.window);
}

std::vector<LatencyRouter::TargetStatus> LatencyRouter::status(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  std::vector<TargetStatus> out;
  for (std::size_t r = 0; r < config_->rules.size(); ++r) {
    const LatencyRule& rule = config_->rules[r];
    auto assessed = assess(r, now);
    for (std::size_t t = 0; t < rule.targets.size(); ++t) {
      const auto& a = assessed[t];
      out.push_back({rule.id, rule.targets[t].target, a.summary.samples, a.summary.average_ms,
                     a.judged, a.judged && a.candidate});
    }
  }
  return out;
}

void LatencyRouter::reconfigure(LoadBalancingConfig config) {
  auto next = std::make_shared<const LoadBalancingConfig>(std::move(config));
  auto windows = empty_windows(*next);
  auto index = index_rules(*next);
  std::lock_guard lock(mu_);
  for (std::size_t r = 0; r < next->rules.size(); ++r) {
    const LatencyRule& rule = next->rules[r];
    auto old = rule_index_.find(rule.id);
    if (old == rule_index_.end()) {
      continue;
    }
    const LatencyRule& old_rule = config_->rules[old->second];
    for (std::size_t t = 0; t < rule.targets.size(); ++t) {
      std::size_t o = find_target(old_rule, rule.targets[t].target);
      if (o < old_rule.targets.size()) {
        windows[r][t] = std::move(windows_[old->second][o]);
        windows[r][t].trim(next->settings.window_requests);
      }
    }
  }
  // Swap, so the old generation is freed after the lock is released.
  std::swap(config_, next);
  std::swap(windows_, windows);
  std::swap(rule_index_, index);
}

std::shared_ptr<const LoadBalancingConfig> LatencyRouter::config() const {
  std::lock_guard lock(mu_);
  return config_;
}

}  // namespace llmd::epp::routing
