#include "epp/queue/saturation.h"

#include <algorithm>

namespace llmd::epp {

bool SaturationThresholds::any() const {
  return prefill_fraction || in_flight_requests || waiting_requests || kv_cache_usage ||
         predicted_ttft_ms;
}

SaturationThresholds SaturationThresholds::dynamo_default() {
  SaturationThresholds t;
  t.prefill_fraction = 2.0;
  return t;
}

bool pod_saturated(const Endpoint& e, const SaturationThresholds& t,
                   std::optional<double> predicted_ttft_ms) {
  if (t.prefill_fraction && t.max_batched_tokens > 0 &&
      static_cast<double>(e.prefill_tokens_in_flight) / static_cast<double>(t.max_batched_tokens) >=
          *t.prefill_fraction) {
    return true;
  }
  if (t.in_flight_requests && e.dispatched >= *t.in_flight_requests) {
    return true;
  }
  if (t.waiting_requests && e.metrics().waiting >= *t.waiting_requests) {
    return true;
  }
  if (t.kv_cache_usage && e.metrics().kv_cache_usage >= *t.kv_cache_usage) {
    return true;
  }
  return t.predicted_ttft_ms && predicted_ttft_ms && *predicted_ttft_ms >= *t.predicted_ttft_ms;
}

bool pool_saturated(std::span<const Endpoint> pods, const SaturationThresholds& t,
                    const PredictedTtftLookup& predicted_ttft) {
  if (pods.empty()) {
    return false;
  }
  return std::all_of(pods.begin(), pods.end(), [&](const Endpoint& e) {
    std::optional<double> ttft;
    if (predicted_ttft) {
      ttft = predicted_ttft(e);
    } else if (e.latency) {
      ttft = e.latency->predicted_ttft_ms;
    }
    return pod_saturated(e, t, ttft);
  });
}

}  // namespace llmd::epp
