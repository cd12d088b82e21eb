#include "epp/features/feature_row.h"

#include <algorithm>
#include <cmath>

namespace llmd::epp {
namespace {

double prefix_score(const Endpoint& pod) {
  return pod.prefix ? std::clamp(pod.prefix->score(), 0.0, 1.0) : 0.0;
}

}  // namespace

features::FeatureInput feature_row(const SchedulingRequest& request, const Endpoint& pod) {
  features::FeatureInput in;
  // Scrapes can report slightly over 1 (or garbage); the trainer's buckets expect [0, 1].
  in.kv_cache_percentage = std::isfinite(pod.metrics().kv_cache_usage)
                               ? std::clamp(pod.metrics().kv_cache_usage, 0.0, 1.0)
                               : 0.0;
  in.input_token_length = std::max<int64_t>(0, request.input_tokens);
  in.num_request_waiting = std::max<int64_t>(0, pod.metrics().waiting);
  in.num_request_running = std::max<int64_t>(0, pod.metrics().running);
  in.num_tokens_generated = 1;
  in.prefix_cache_score = prefix_score(pod);
  in.pod_type = features::pod_type_from_string(pod.role());
  in.prefill_tokens_in_flight = std::max<int64_t>(0, pod.prefill_tokens_in_flight);
  in.decode_tokens_in_flight = std::max<int64_t>(0, pod.decode_tokens_in_flight);
  return in;
}

int64_t uncached_prompt_tokens(const SchedulingRequest& request, const Endpoint& pod) {
  const auto input = std::max<int64_t>(0, request.input_tokens);
  const auto cached =
      static_cast<int64_t>(std::floor(prefix_score(pod) * static_cast<double>(input)));
  return std::max<int64_t>(0, input - cached);
}

}  // namespace llmd::epp
