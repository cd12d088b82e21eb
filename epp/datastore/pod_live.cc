#include "epp/datastore/pod_live.h"

namespace llmd::epp {

void PoolLearning::observe_ttft(double bound_ms, double actual_ms) {
  std::lock_guard lock(mu_);
  ttft_.add(bound_ms, actual_ms);
  ttft_factor_.store(ttft_.factor(), std::memory_order_relaxed);
}

void PoolLearning::observe_tpot(double bound_ms, double actual_ms) {
  std::lock_guard lock(mu_);
  tpot_.add(bound_ms, actual_ms);
  tpot_factor_.store(tpot_.factor(), std::memory_order_relaxed);
}

void PodLive::on_dispatch(int64_t input_tokens) {
  dispatched_.fetch_add(1, std::memory_order_relaxed);
  prefill_tokens_.fetch_add(input_tokens, std::memory_order_relaxed);
}

void PodLive::on_first_token(int64_t input_tokens, int64_t max_tokens) {
  prefill_tokens_.fetch_sub(input_tokens, std::memory_order_relaxed);
  decode_tokens_.fetch_add(max_tokens, std::memory_order_relaxed);
}

void PodLive::on_finished(int64_t input_tokens, int64_t decode_tokens, bool first_token_seen) {
  dispatched_.fetch_sub(1, std::memory_order_relaxed);
  if (first_token_seen) {
    decode_tokens_.fetch_sub(decode_tokens, std::memory_order_relaxed);
  } else {
    prefill_tokens_.fetch_sub(input_tokens, std::memory_order_relaxed);
  }
}

PodLive::Load PodLive::load() const {
  // Never negative: each request's decrement follows its own increment on the same counter.
  return {dispatched_.load(std::memory_order_relaxed),
          prefill_tokens_.load(std::memory_order_relaxed),
          decode_tokens_.load(std::memory_order_relaxed)};
}

void PodLive::record_predicted_ttft(double ttft_ms, TimePoint now) {
  predicted_ttft_ms_.store(ttft_ms, std::memory_order_relaxed);
  predicted_at_.store(now.time_since_epoch().count(), std::memory_order_release);
}

std::optional<double> PodLive::predicted_ttft(TimePoint now,
                                              std::chrono::milliseconds staleness) const {
  const int64_t at = predicted_at_.load(std::memory_order_acquire);
  if (at == kNever || now - TimePoint(TimePoint::duration(at)) > staleness) {
    return std::nullopt;
  }
  return predicted_ttft_ms_.load(std::memory_order_relaxed);
}

void PodLive::observe_ttft(double model_ms, double bound_ms, double actual_ms, TimePoint now) {
  {
    std::lock_guard lock(learn_mu_);
    ttft_learning_.add(model_ms, actual_ms, now);
    ttft_residual_.store(ttft_learning_);
  }
  pool_->observe_ttft(bound_ms, actual_ms);
}

void PodLive::observe_tpot(double model_ms, double bound_ms, double actual_ms, TimePoint now) {
  {
    std::lock_guard lock(learn_mu_);
    tpot_learning_.add(model_ms, actual_ms, now);
    tpot_residual_.store(tpot_learning_);
  }
  pool_->observe_tpot(bound_ms, actual_ms);
}

}  // namespace llmd::epp
