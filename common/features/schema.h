#pragma once
// The feature schema shared by trainer and predictor: the raw inputs of a prediction row or a
// training entry, the derived features, and the column order of every model. Column order is
// part of every saved model, so it lives here and nowhere else.
#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace llmd::features {

// Categories of `pod_type`: "" (or null), "prefill", "decode". Anything else is unknown and is
// fed to the trees as missing (NaN), never an error.
enum class PodType : int8_t { kUnknown = -1, kNone = 0, kPrefill = 1, kDecode = 2 };
PodType pod_type_from_string(std::string_view s);
std::string_view pod_type_name(PodType t);  // "" for kNone; "unknown" for kUnknown

// Raw inputs, exactly the contract's fields (predictor-api.md section 2).
struct FeatureInput {
  double kv_cache_percentage = 0;  // 0..1
  int64_t input_token_length = 0;
  int64_t num_request_waiting = 0;
  int64_t num_request_running = 0;
  int64_t num_tokens_generated = 0;
  double prefix_cache_score = 0;  // 0..1
  PodType pod_type = PodType::kNone;
  int64_t prefill_tokens_in_flight = 0;
  int64_t decode_tokens_in_flight = 0;
  int64_t encoder_matched_size = 0;
  int64_t encoder_input_size = 0;
};

// The wire fields of a row (predictor-api.md section 2), in the contract's order: every reader
// and writer of rows (JSON objects) or columns (the columnar endpoint) walks this table, so a
// field's name, type and range are spelled here and nowhere else.
enum class FieldKind : uint8_t {
  kUnit,     // float in [0, 1]
  kCount,    // integer >= 0
  kPodType,  // string or null (null means "")
};
struct FeatureField {
  std::string_view name;
  FieldKind kind;
  bool required;
  double FeatureInput::*unit = nullptr;    // kUnit: the member it fills
  int64_t FeatureInput::*count = nullptr;  // kCount: the member it fills
};
inline constexpr std::array<FeatureField, 11> kFeatureFields = {{
    {"kv_cache_percentage", FieldKind::kUnit, true, &FeatureInput::kv_cache_percentage},
    {"input_token_length", FieldKind::kCount, true, nullptr, &FeatureInput::input_token_length},
    {"num_request_waiting", FieldKind::kCount, true, nullptr, &FeatureInput::num_request_waiting},
    {"num_request_running", FieldKind::kCount, true, nullptr, &FeatureInput::num_request_running},
    {"num_tokens_generated", FieldKind::kCount, true, nullptr, &FeatureInput::num_tokens_generated},
    {"prefix_cache_score", FieldKind::kUnit, true, &FeatureInput::prefix_cache_score},
    {"pod_type", FieldKind::kPodType, false},
    {"prefill_tokens_in_flight", FieldKind::kCount, false, nullptr,
     &FeatureInput::prefill_tokens_in_flight},
    {"decode_tokens_in_flight", FieldKind::kCount, false, nullptr,
     &FeatureInput::decode_tokens_in_flight},
    {"encoder_matched_size", FieldKind::kCount, false, nullptr,
     &FeatureInput::encoder_matched_size},
    {"encoder_input_size", FieldKind::kCount, false, nullptr, &FeatureInput::encoder_input_size},
}};
// The index of `name` in kFeatureFields, or -1.
int feature_field_index(std::string_view name);
// Copies field `f` of `from` into `to` (one value broadcast to many rows).
inline void copy_field(const FeatureField& f, const FeatureInput& from, FeatureInput& to) {
  switch (f.kind) {
    case FieldKind::kUnit:
      to.*f.unit = from.*f.unit;
      break;
    case FieldKind::kCount:
      to.*f.count = from.*f.count;
      break;
    case FieldKind::kPodType:
      to.pod_type = from.pod_type;
      break;
  }
}

enum class Column : uint8_t {
  kIsQueued,
  kKvCachePercentage,
  kInputTokenLength,
  kNumRequestWaiting,
  kNumRequestRunning,
  kPrefillTokensInFlight,
  kDecodeTokensInFlight,
  kEncoderMatchedSize,
  kEncoderInputSize,
  kPrefixCacheScore,
  kEffectiveInputTokens,
  kPrefillScoreBucket,  // categorical 0..3
  kPodTypeCat,          // categorical 0..2, unknown = missing
  kNumTokensGenerated,
};
std::string_view column_name(Column c);
bool is_categorical(Column c);

// Which model a row is built for. The "no queue" sets are the ensemble's waiting = 0 sub-models:
// they drop is_queued and num_request_waiting, which are constant there.
enum class FeatureSet : uint8_t { kTtft, kTtftNoQueue, kTpot, kTpotNoQueue };
inline constexpr std::array kAllFeatureSets = {FeatureSet::kTtft, FeatureSet::kTtftNoQueue,
                                               FeatureSet::kTpot, FeatureSet::kTpotNoQueue};
std::span<const Column> columns(FeatureSet set);
std::string_view feature_set_name(FeatureSet set);  // "ttft", "ttft_noqueue", ...

// The direction latency must move in when a column grows, all else equal: +1 (more queue, more
// KV in use, more tokens in flight, a longer prompt never make a pod faster), -1 (a higher
// prefix-cache score never makes the first token slower), 0 (no constraint: categoricals, the
// encoder columns, generated tokens). The trainer passes these to XGBoost as monotone
// constraints: a router ranks pods by the model, and a tree that learned noise (a pod with
// more in flight predicted faster) turns that ranking upside down. The categorical
// prefill_score_bucket cannot be constrained, so the prefix direction holds within a bucket.
int monotone_direction(FeatureSet set, Column c);
inline constexpr std::size_t kMaxColumns = 13;

// Derived features (contract section 2).
inline bool is_queued(const FeatureInput& in) {
  return in.num_request_waiting > 0;
}
int prefill_score_bucket(double prefix_cache_score);  // min(floor(p*4), 3)

// Value of one column as XGBoost sees it (float; NaN = missing).
float column_value(const FeatureInput& in, Column c);
// Writes columns(set).size() floats to `out` in column order.
void fill_row(const FeatureInput& in, FeatureSet set, float* out);

}  // namespace llmd::features
