#include "epp/scheduler/decision_log.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

namespace llmd::epp {
namespace {

// Sampling draws from its own generator: the cycle's Rng belongs to the plugins, and a draw
// taken from it would change which pod a seeded test or simulation picks.
double uniform() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
}

}  // namespace

std::string DecisionLogConfig::validate() const {
  if (!(sample_rate >= 0 && sample_rate <= 1)) {
    return fmt::format("sampleRate must be in [0, 1], got {}", sample_rate);
  }
  if (!(max_lines_per_second > 0) || !std::isfinite(max_lines_per_second)) {
    return fmt::format("maxLinesPerSecond must be positive, got {}", max_lines_per_second);
  }
  if (max_candidates < 1 || max_candidates > 1000) {
    return fmt::format("maxCandidates must be in [1, 1000], got {}", max_candidates);
  }
  return {};
}

DecisionLog::DecisionLog(DecisionLogConfig config, Sink sink, prometheus::Registry* registry,
                         Now now)
    : sink_(sink ? std::move(sink)
                 : Sink([](const std::string& line) { spdlog::info("{}", line); })),
      now_(now ? std::move(now) : Now([] { return Clock::now(); })),
      sample_rate_(config.sample_rate),
      config_(config),
      tokens_(std::max(1.0, config.max_lines_per_second)),
      refilled_(now_()) {
  if (registry != nullptr) {
    auto& family = prometheus::BuildCounter()
                       .Name("llmd_epp_decision_log_lines_total")
                       .Help(
                           "Decision log lines of sampled requests: written, or refused by "
                           "the line budget (maxLinesPerSecond)")
                       .Register(*registry);
    written_metric_ = &family.Add({{"outcome", "written"}});
    rate_limited_metric_ = &family.Add({{"outcome", "rate_limited"}});
  }
}

void DecisionLog::configure(const DecisionLogConfig& config) {
  std::lock_guard lock(mu_);
  if (config == config_) {
    return;
  }
  spdlog::info(
      "decision log reconfigured: sample rate {}, at most {} lines/s, {} candidates "
      "per line",
      config.sample_rate, config.max_lines_per_second, config.max_candidates);
  config_ = config;
  tokens_ = std::min(tokens_, std::max(1.0, config.max_lines_per_second));
  sample_rate_.store(config.sample_rate, std::memory_order_relaxed);
}

DecisionLogConfig DecisionLog::config() const {
  std::lock_guard lock(mu_);
  return config_;
}

bool DecisionLog::sample() {
  const double rate = sample_rate_.load(std::memory_order_relaxed);
  if (rate <= 0 || (rate < 1 && uniform() >= rate)) {
    return false;
  }
  std::lock_guard lock(mu_);
  const auto now = now_();
  const double capacity = std::max(1.0, config_.max_lines_per_second);
  if (now > refilled_) {
    const double elapsed = std::chrono::duration<double>(now - refilled_).count();
    tokens_ = std::min(capacity, tokens_ + elapsed * config_.max_lines_per_second);
    refilled_ = now;
  }
  if (tokens_ < 1) {
    ++refused_since_last_line_;
    ++rate_limited_;
    if (rate_limited_metric_ != nullptr) {
      rate_limited_metric_->Increment();
    }
    return false;
  }
  tokens_ -= 1;
  return true;
}

void DecisionLog::write(const DecisionExplanation& explanation) {
  std::size_t max_candidates = 10;
  uint64_t refused = 0;
  {
    std::lock_guard lock(mu_);
    max_candidates = config_.max_candidates;
    refused = std::exchange(refused_since_last_line_, 0);
  }
  nlohmann::ordered_json line = decision_to_json(explanation, max_candidates);
  if (refused > 0) {
    line["rate_limited_before"] = refused;  // sampled lines the budget refused since the last
  }
  sink_("decision " + line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  ++written_;
  if (written_metric_ != nullptr) {
    written_metric_->Increment();
  }
}

}  // namespace llmd::epp
