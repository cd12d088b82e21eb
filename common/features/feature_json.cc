#include "common/features/feature_json.h"

#include <fmt/format.h>

#include "common/util/time.h"

namespace llmd::features {
namespace {
const json::NumberRange kNonNegative{0.0, std::nullopt};
const json::NumberRange kUnit{0.0, 1.0};

// One field of a row object, by the contract's rule for it.
void read_field(const FeatureField& f, const json::Json& obj, json::Loc& loc, json::Errors& errors,
                FeatureInput& out) {
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

// One value of a column (an item, or the single value of every row), checked as the same
// field of a row object is: null is the default of an optional field.
void read_value(const FeatureField& f, const json::Json& v, const json::Loc& loc,
                json::Errors& errors, FeatureInput& out) {
  const bool absent = v.is_null() && !f.required;
  switch (f.kind) {
    case FieldKind::kUnit:
      out.*f.unit = absent ? 0 : json::check_float(v, loc, errors, 0, kUnit);
      break;
    case FieldKind::kCount:
      out.*f.count = absent ? 0 : json::check_int(v, loc, errors, 0, kNonNegative);
      break;
    case FieldKind::kPodType: {
      auto pod_type = json::check_optional_string(v, loc, errors);
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

bool read_feature_columns(const json::Json& obj, json::Loc& loc, json::Errors& errors,
                          std::size_t max_rows, std::vector<FeatureInput>& out) {
  const std::size_t before = errors.size();
  std::array<const json::Json*, kFeatureFields.size()> values{};
  std::string_view first_list;  // the field whose list sets the row count
  std::size_t rows = 1;         // single values only: one row
  for (std::size_t i = 0; i < kFeatureFields.size(); ++i) {
    const auto& f = kFeatureFields[i];
    auto it = obj.find(f.name);
    if (it == obj.end()) {
      if (f.required) {
        errors.add_at("missing", loc, f.name, "Field required", obj);
      }
      continue;
    }
    values[i] = &*it;
    if (!it->is_array()) {
      continue;
    }
    if (first_list.empty()) {
      first_list = f.name;
      rows = it->size();
    } else if (it->size() != rows) {
      errors.add_at(it->size() < rows ? "too_short" : "too_long", loc, f.name,
                    fmt::format("List should have {} items, as many as {}, not {}", rows,
                                first_list, it->size()),
                    json::Json::array());
    }
  }
  if (!first_list.empty() && rows == 0) {
    errors.add_at("too_short", loc, first_list,
                  "List should have at least 1 item after validation, not 0", json::Json::array());
  } else if (rows > max_rows) {
    json::add_too_long(loc, first_list, max_rows, rows, errors);
  }
  if (errors.size() != before) {
    return false;  // the shape is wrong: the items are not looked at
  }
  out.assign(rows, FeatureInput{});
  for (std::size_t i = 0; i < kFeatureFields.size(); ++i) {
    const auto& f = kFeatureFields[i];
    if (values[i] == nullptr) {
      continue;  // an optional field left out: its default
    }
    json::LocScope field(loc, f.name);
    if (values[i]->is_array()) {
      for (std::size_t r = 0; r < rows; ++r) {
        json::LocScope item(loc, static_cast<int64_t>(r));
        read_value(f, (*values[i])[r], loc, errors, out[r]);
      }
    } else {
      read_value(f, *values[i], loc, errors, out[0]);
      for (std::size_t r = 1; r < rows; ++r) {
        copy_field(f, out[0], out[r]);
      }
    }
  }
  return errors.size() == before;
}

bool read_training_entry(const json::Json& obj, json::Loc& loc, json::Errors& errors,
                         TrainingEntry& out) {
  std::size_t before = errors.size();
  read_feature_input(obj, loc, errors, out.features);
  out.actual_ttft_ms = json::read_float(obj, "actual_ttft_ms", loc, errors, true, 0, kNonNegative);
  out.actual_tpot_ms = json::read_float(obj, "actual_tpot_ms", loc, errors, true, 0, kNonNegative);
  out.predicted_ttft_ms =
      json::read_float(obj, "predicted_ttft_ms", loc, errors, false, -1, kNonNegative);
  out.predicted_tpot_ms =
      json::read_float(obj, "predicted_tpot_ms", loc, errors, false, -1, kNonNegative);
  out.expected_ttft_ms =
      json::read_float(obj, "expected_ttft_ms", loc, errors, false, -1, kNonNegative);
  out.expected_tpot_ms =
      json::read_float(obj, "expected_tpot_ms", loc, errors, false, -1, kNonNegative);
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
