#include "common/features/schema.h"

#include <cmath>
#include <limits>

namespace llmd::features {
namespace {

using C = Column;
constexpr std::array<Column, 13> kTtftColumns = {C::kIsQueued,
                                                 C::kKvCachePercentage,
                                                 C::kInputTokenLength,
                                                 C::kNumRequestWaiting,
                                                 C::kNumRequestRunning,
                                                 C::kPrefillTokensInFlight,
                                                 C::kDecodeTokensInFlight,
                                                 C::kEncoderMatchedSize,
                                                 C::kEncoderInputSize,
                                                 C::kPrefixCacheScore,
                                                 C::kEffectiveInputTokens,
                                                 C::kPrefillScoreBucket,
                                                 C::kPodTypeCat};
constexpr std::array<Column, 11> kTtftNoQueueColumns = {C::kKvCachePercentage,
                                                        C::kInputTokenLength,
                                                        C::kNumRequestRunning,
                                                        C::kPrefillTokensInFlight,
                                                        C::kDecodeTokensInFlight,
                                                        C::kEncoderMatchedSize,
                                                        C::kEncoderInputSize,
                                                        C::kPrefixCacheScore,
                                                        C::kEffectiveInputTokens,
                                                        C::kPrefillScoreBucket,
                                                        C::kPodTypeCat};
constexpr std::array<Column, 9> kTpotColumns = {C::kIsQueued,
                                                C::kKvCachePercentage,
                                                C::kInputTokenLength,
                                                C::kNumRequestWaiting,
                                                C::kNumRequestRunning,
                                                C::kPrefillTokensInFlight,
                                                C::kDecodeTokensInFlight,
                                                C::kNumTokensGenerated,
                                                C::kPodTypeCat};
constexpr std::array<Column, 7> kTpotNoQueueColumns = {C::kKvCachePercentage,
                                                       C::kInputTokenLength,
                                                       C::kNumRequestRunning,
                                                       C::kPrefillTokensInFlight,
                                                       C::kDecodeTokensInFlight,
                                                       C::kNumTokensGenerated,
                                                       C::kPodTypeCat};

}  // namespace

PodType pod_type_from_string(std::string_view s) {
  if (s.empty()) {
    return PodType::kNone;
  }
  if (s == "prefill") {
    return PodType::kPrefill;
  }
  if (s == "decode") {
    return PodType::kDecode;
  }
  return PodType::kUnknown;
}

std::string_view pod_type_name(PodType t) {
  switch (t) {
    case PodType::kNone:
      return "";
    case PodType::kPrefill:
      return "prefill";
    case PodType::kDecode:
      return "decode";
    case PodType::kUnknown:
      break;
  }
  return "unknown";
}

int feature_field_index(std::string_view name) {
  for (std::size_t i = 0; i < kFeatureFields.size(); ++i) {
    if (kFeatureFields[i].name == name) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

std::string_view column_name(Column c) {
  switch (c) {
    case C::kIsQueued:
      return "is_queued";
    case C::kKvCachePercentage:
      return "kv_cache_percentage";
    case C::kInputTokenLength:
      return "input_token_length";
    case C::kNumRequestWaiting:
      return "num_request_waiting";
    case C::kNumRequestRunning:
      return "num_request_running";
    case C::kPrefillTokensInFlight:
      return "prefill_tokens_in_flight";
    case C::kDecodeTokensInFlight:
      return "decode_tokens_in_flight";
    case C::kEncoderMatchedSize:
      return "encoder_matched_size";
    case C::kEncoderInputSize:
      return "encoder_input_size";
    case C::kPrefixCacheScore:
      return "prefix_cache_score";
    case C::kEffectiveInputTokens:
      return "effective_input_tokens";
    case C::kPrefillScoreBucket:
      return "prefill_score_bucket";
    case C::kPodTypeCat:
      return "pod_type_cat";
    case C::kNumTokensGenerated:
      return "num_tokens_generated";
  }
  return "?";
}

bool is_categorical(Column c) {
  return c == C::kPrefillScoreBucket || c == C::kPodTypeCat;
}

int monotone_direction(FeatureSet set, Column c) {
  const bool ttft = set == FeatureSet::kTtft || set == FeatureSet::kTtftNoQueue;
  switch (c) {
    case C::kIsQueued:
    case C::kKvCachePercentage:
    case C::kInputTokenLength:
    case C::kNumRequestWaiting:
    case C::kNumRequestRunning:
    case C::kPrefillTokensInFlight:
    case C::kDecodeTokensInFlight:
      return 1;
    case C::kEffectiveInputTokens:
      return ttft ? 1 : 0;
    case C::kPrefixCacheScore:
      return ttft ? -1 : 0;
    default:
      return 0;
  }
}

std::span<const Column> columns(FeatureSet set) {
  switch (set) {
    case FeatureSet::kTtft:
      return kTtftColumns;
    case FeatureSet::kTtftNoQueue:
      return kTtftNoQueueColumns;
    case FeatureSet::kTpot:
      return kTpotColumns;
    case FeatureSet::kTpotNoQueue:
      return kTpotNoQueueColumns;
  }
  return {};
}

std::string_view feature_set_name(FeatureSet set) {
  switch (set) {
    case FeatureSet::kTtft:
      return "ttft";
    case FeatureSet::kTtftNoQueue:
      return "ttft_noqueue";
    case FeatureSet::kTpot:
      return "tpot";
    case FeatureSet::kTpotNoQueue:
      return "tpot_noqueue";
  }
  return "?";
}

int prefill_score_bucket(double p) {
  int b = static_cast<int>(std::floor(p * 4.0));
  return b < 0 ? 0 : (b > 3 ? 3 : b);
}

float column_value(const FeatureInput& in, Column c) {
  switch (c) {
    case C::kIsQueued:
      return is_queued(in) ? 1.0f : 0.0f;
    case C::kKvCachePercentage:
      return static_cast<float>(in.kv_cache_percentage);
    case C::kInputTokenLength:
      return static_cast<float>(in.input_token_length);
    case C::kNumRequestWaiting:
      return static_cast<float>(in.num_request_waiting);
    case C::kNumRequestRunning:
      return static_cast<float>(in.num_request_running);
    case C::kPrefillTokensInFlight:
      return static_cast<float>(in.prefill_tokens_in_flight);
    case C::kDecodeTokensInFlight:
      return static_cast<float>(in.decode_tokens_in_flight);
    case C::kEncoderMatchedSize:
      return static_cast<float>(in.encoder_matched_size);
    case C::kEncoderInputSize:
      return static_cast<float>(in.encoder_input_size);
    case C::kPrefixCacheScore:
      return static_cast<float>(in.prefix_cache_score);
    case C::kEffectiveInputTokens:
      return static_cast<float>((1.0 - in.prefix_cache_score) *
                                static_cast<double>(in.input_token_length));
    case C::kPrefillScoreBucket:
      return static_cast<float>(prefill_score_bucket(in.prefix_cache_score));
    case C::kPodTypeCat:
      return in.pod_type == PodType::kUnknown ? std::numeric_limits<float>::quiet_NaN()
                                              : static_cast<float>(in.pod_type);
    case C::kNumTokensGenerated:
      return static_cast<float>(in.num_tokens_generated);
  }
  return std::numeric_limits<float>::quiet_NaN();
}

void fill_row(const FeatureInput& in, FeatureSet set, float* out) {
  for (Column c : columns(set)) {
    *out++ = column_value(in, c);
  }
}

}  // namespace llmd::features
