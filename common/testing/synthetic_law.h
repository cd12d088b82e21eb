#pragma once
// A known noisy latency law for learning tests and benchmarks: TTFT and TPOT are linear in the
// features times log-normal noise, plus a small additive jitter, so the conditional p90 is known
// in closed form up to the jitter. Header-only, deterministic per seed.
#include <cmath>
#include <random>

#include "common/features/schema.h"

namespace llmd::testing {

struct SyntheticLaw {
  double sigma = 0.15;           // log-normal noise scale
  double jitter_ms = 1.0;        // additive N(0, jitter) on TTFT
  bool inflight_signal = false;  // prefill/decode tokens in flight move the latencies

  double ttft_mean(const features::FeatureInput& f) const {
    double v = 15.0 +
               0.08 * (1.0 - f.prefix_cache_score) * static_cast<double>(f.input_token_length) +
               40.0 * static_cast<double>(f.num_request_waiting) +
               1.5 * static_cast<double>(f.num_request_running) + 60.0 * f.kv_cache_percentage;
    if (inflight_signal) {
      v += 0.02 * static_cast<double>(f.prefill_tokens_in_flight);
    }
    return v;
  }
  double tpot_mean(const features::FeatureInput& f) const {
    double v = 8.0 + 20.0 * f.kv_cache_percentage +
               0.002 * static_cast<double>(f.input_token_length) +
               0.4 * static_cast<double>(f.num_request_running) +
               0.01 * static_cast<double>(f.num_tokens_generated);
    if (inflight_signal) {
      v += 0.004 * static_cast<double>(f.decode_tokens_in_flight);
    }
    return v;
  }
  // Conditional alpha-quantile of the log-normal part (ignores the small jitter).
  double quantile_factor(double z_alpha) const { return std::exp(z_alpha * sigma); }

  features::FeatureInput draw_features(std::mt19937_64& rng) const {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    features::FeatureInput f;
    f.kv_cache_percentage = u(rng);
    f.input_token_length = static_cast<int64_t>(50 + u(rng) * 4000);
    f.num_request_waiting = static_cast<int64_t>(u(rng) < 0.4 ? 0 : u(rng) * 12);
    f.num_request_running = static_cast<int64_t>(u(rng) * 32);
    f.num_tokens_generated = static_cast<int64_t>(1 + u(rng) * 500);
    f.prefix_cache_score = u(rng) < 0.3 ? 0.0 : u(rng);
    f.prefill_tokens_in_flight = static_cast<int64_t>(u(rng) * 8000);
    f.decode_tokens_in_flight = static_cast<int64_t>(u(rng) * 4000);
    return f;
  }
  double draw_ttft(const features::FeatureInput& f, std::mt19937_64& rng) const {
    std::normal_distribution<double> n(0.0, 1.0);
    double v = ttft_mean(f) * std::exp(sigma * n(rng)) + jitter_ms * n(rng);
    return v > 0.1 ? v : 0.1;
  }
  double draw_tpot(const features::FeatureInput& f, std::mt19937_64& rng) const {
    std::normal_distribution<double> n(0.0, 1.0);
    double v = tpot_mean(f) * std::exp(sigma * n(rng));
    return v > 0.1 ? v : 0.1;
  }
};

}  // namespace llmd::testing
