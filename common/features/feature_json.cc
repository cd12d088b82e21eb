#include "common/features/feature_json.h"

#include "common/util/time.h"

namespace llmd::features {
namespace {
const json::NumberRange kNonNegative{0.0, std::nullopt};
const json::NumberRange kUnit{0.0, 1.0};

// One field of a row object, by the contract's rule for it.
void read_field(const FeatureField& f, const json::Json& obj, json::Loc& loc,
                json::Errors& errors, FeatureInput& out) {
  switch (f.kind) {
    case FieldKind::kUnit:
      out.*f.unit = json::read_float(obj, f.name, loc, errors, f.required, 0, kUnit);
      break;
    case FieldKind::kCount:
      out.*f.count = json::read_int(obj, f.name, loc, errors, f.required, 0, kNonNegative);
      break;
    case FieldKind::kPodType: {
      auto pod_type = json::read_optional_string(obj, f.name, loc, errors);
      out.pod_type = pod_type ? pod_type_from_string(*pod_type) : PodType::kNone;
      break;
    }
  }
}

}  // namespace

bool read_feature_input(const json::Json& obj, json::Loc& loc, json::Errors& errors,
                        FeatureInput& out) {
  std::size_t before = errors.size();
  for (const auto& f : kFeatureFields) {
    read_field(f, obj, loc, errors, out);
  }
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
  json::Json j = json::Json::object();
  for (const auto& f : kFeatureFields) {
    switch (f.kind) {
      case FieldKind::kUnit:
        j[f.name] = in.*f.unit;
        break;
      case FieldKind::kCount:
        j[f.name] = in.*f.count;
        break;
      case FieldKind::kPodType:
        j[f.name] = pod_type_name(in.pod_type);
        break;
    }
  }
  return j;
}

}  // namespace llmd::features
