#include "common/features/feature_json.h"

#include "common/util/time.h"

namespace llmd::features {
namespace {
const json::NumberRange kNonNegative{0.0, std::nullopt};
const json::NumberRange kUnit{0.0, 1.0};
}  // namespace

bool read_feature_input(const json::Json& obj, json::Loc& loc, json::Errors& errors,
                        FeatureInput& out) {
  std::size_t before = errors.size();
  out.kv_cache_percentage = json::read_float(obj, "kv_cache_percentage", loc, errors, true, 0, kUnit);
  out.input_token_length = json::read_int(obj, "input_token_length", loc, errors, true, 0, kNonNegative);
  out.num_request_waiting = json::read_int(obj, "num_request_waiting", loc, errors, true, 0, kNonNegative);
  out.num_request_running = json::read_int(obj, "num_request_running", loc, errors, true, 0, kNonNegative);
  out.num_tokens_generated = json::read_int(obj, "num_tokens_generated", loc, errors, true, 0, kNonNegative);
  out.prefix_cache_score = json::read_float(obj, "prefix_cache_score", loc, errors, true, 0, kUnit);
  auto pod_type = json::read_optional_string(obj, "pod_type", loc, errors);
  out.pod_type = pod_type ? pod_type_from_string(*pod_type) : PodType::kNone;
  out.prefill_tokens_in_flight =
      json::read_int(obj, "prefill_tokens_in_flight", loc, errors, false, 0, kNonNegative);
  out.decode_tokens_in_flight =
      json::read_int(obj, "decode_tokens_in_flight", loc, errors, false, 0, kNonNegative);
  out.encoder_matched_size =
      json::read_int(obj, "encoder_matched_size", loc, errors, false, 0, kNonNegative);
  out.encoder_input_size =
      json::read_int(obj, "encoder_input_size", loc, errors, false, 0, kNonNegative);
  return errors.size() == before;
}

bool read_training_entry(const json::Json& obj, json::Loc& loc, json::Errors& errors,
                         TrainingEntry& out) {
  std::size_t before = errors.size();
  read_feature_input(obj, loc, errors, out.features);
  out.actual_ttft_ms = json::read_float(obj, "actual_ttft_ms", loc, errors, true, 0, kNonNegative);
  out.actual_tpot_ms = json::read_float(obj, "actual_tpot_ms", loc, errors, true, 0, kNonNegative);
  out.predicted_ttft_ms = json::read_float(obj, "predicted_ttft_ms", loc, errors, false, -1, kNonNegative);
  out.predicted_tpot_ms = json::read_float(obj, "predicted_tpot_ms", loc, errors, false, -1, kNonNegative);
  out.expected_ttft_ms = json::read_float(obj, "expected_ttft_ms", loc, errors, false, -1, kNonNegative);
  out.expected_tpot_ms = json::read_float(obj, "expected_tpot_ms", loc, errors, false, -1, kNonNegative);
  auto ts = obj.find("timestamp");
  if (ts != obj.end() && !ts->is_null()) {
    if (!ts->is_string() || !util::parse_rfc3339(ts->get<std::string>())) {
      errors.add_at("datetime_from_date_parsing", loc, "timestamp",
                    "Input should be a valid datetime", *ts);
    }
  }
  return errors.size() == before;
}

json::Json feature_input_to_json(const FeatureInput& in) {
  json::Json j = {{"kv_cache_percentage", in.kv_cache_percentage},
                  {"input_token_length", in.input_token_length},
                  {"num_request_waiting", in.num_request_waiting},
                  {"num_request_running", in.num_request_running},
                  {"num_tokens_generated", in.num_tokens_generated},
                  {"prefix_cache_score", in.prefix_cache_score},
                  {"pod_type", pod_type_name(in.pod_type)},
                  {"prefill_tokens_in_flight", in.prefill_tokens_in_flight},
                  {"decode_tokens_in_flight", in.decode_tokens_in_flight},
                  {"encoder_matched_size", in.encoder_matched_size},
                  {"encoder_input_size", in.encoder_input_size}};
  return j;
}

}  // namespace llmd::features
