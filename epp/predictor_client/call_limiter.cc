#include "epp/predictor_client/call_limiter.h"

#include <algorithm>

namespace llmd::epp::predictor_client {

CallLimiter::CallLimiter(Config config)
    : config_(config),
      limit_(std::clamp(config.initial_limit, config.min_limit, config.max_limit)) {}

bool CallLimiter::try_admit() {
  if (static_cast<double>(outstanding_) + 1 > limit_) {
    return false;
  }
  ++outstanding_;
  return true;
}

void CallLimiter::release() {
  if (outstanding_ > 0) {
    --outstanding_;
  }
}

void CallLimiter::on_answer(Clock::duration latency, Clock::duration budget,
                            Clock::time_point now) {
  // Occupancy at the moment this call was still counted: was the cap in use?
  const bool in_use = 2.0 * static_cast<double>(outstanding_) >= limit_;
  release();
  const double share = budget.count() > 0 ? std::chrono::duration<double>(latency).count() /
                                                std::chrono::duration<double>(budget).count()
                                          : 1.0;
  if (share > config_.slow_share) {
    decrease(now);
  } else if (share <= config_.fast_share && in_use) {
    limit_ = std::min(config_.max_limit, limit_ + 1.0 / limit_);
  }
}

void CallLimiter::on_miss(Clock::time_point now) {
  release();
  decrease(now);
}

void CallLimiter::on_cancel() {
  release();
}

void CallLimiter::decrease(Clock::time_point now) {
  if (decreased_ && now - last_decrease_ < config_.decrease_spacing) {
    return;
  }
  decreased_ = true;
  last_decrease_ = now;
  limit_ = std::max(config_.min_limit, limit_ * config_.backoff);
}

}  // namespace llmd::epp::predictor_client
