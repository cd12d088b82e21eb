#include "predictor/fast_rows.h"

#include <simdjson.h>

#include <array>
#include <cmath>
#include <cstdint>

namespace llmd::predictor {
namespace {

// The DOM API dispatches to the best SIMD kernel at run time (On-Demand would be pinned to the
// compile-time target, which is the portable fallback for a generic x86-64 build).
using simdjson::dom::element;
using simdjson::dom::element_type;

// Integer rule of the contract: JSON integer, or a float with zero fraction; >= 0.
bool read_count(element v, int64_t& out) {
  switch (v.type()) {
    case element_type::INT64:
      out = int64_t(v);
      return out >= 0;
    case element_type::UINT64: {
      uint64_t u = uint64_t(v);
      if (u > static_cast<uint64_t>(INT64_MAX)) {
        return false;
      }
      out = static_cast<int64_t>(u);
      return true;
    }
    case element_type::DOUBLE: {
      double d = double(v);
      if (!std::isfinite(d) || d != std::floor(d) || d < 0 || d > 9.0e18) {
        return false;
      }
      out = static_cast<int64_t>(d);
      return true;
    }
    default:
      return false;
  }
}

bool read_unit(element v, double& out) {
  switch (v.type()) {
    case element_type::INT64:
      out = static_cast<double>(int64_t(v));
      break;
    case element_type::UINT64:
      out = static_cast<double>(uint64_t(v));
      break;
    case element_type::DOUBLE:
      out = double(v);
      break;
    default:
      return false;
  }
  return std::isfinite(out) && out >= 0.0 && out <= 1.0;
}

// Pod type rule of the contract: a string, or null for "".
bool read_pod_type(element v, features::PodType& out) {
  if (v.is_null()) {
    out = features::PodType::kNone;
    return true;
  }
  if (v.is_string()) {
    out = features::pod_type_from_string(std::string_view(v));
    return true;
  }
  return false;
}

// One value of field `f` into `row`, as the contract's rule for the field (a null optional
// field is left to the slow path: it is valid, and rare).
bool read_value(const features::FeatureField& f, element v, features::FeatureInput& row) {
  switch (f.kind) {
    case features::FieldKind::kUnit:
      return read_unit(v, row.*f.unit);
    case features::FieldKind::kCount:
      return read_count(v, row.*f.count);
    case features::FieldKind::kPodType:
      return read_pod_type(v, row.pod_type);
  }
  return false;
}

constexpr uint32_t kRequired = [] {
  uint32_t mask = 0;
  for (std::size_t i = 0; i < features::kFeatureFields.size(); ++i) {
    mask |= features::kFeatureFields[i].required ? 1u << i : 0u;
  }
  return mask;
}();

bool read_row(simdjson::dom::object obj, features::FeatureInput& f) {
  f = features::FeatureInput{};
  uint32_t seen = 0;
  for (auto [key, v] : obj) {
    const int i = features::feature_field_index(key);
    if (i < 0) {
      continue;  // unknown fields are ignored
    }
    if (!read_value(features::kFeatureFields[static_cast<std::size_t>(i)], v, f)) {
      return false;
    }
    seen |= 1u << i;
  }
  return (seen & kRequired) == kRequired;
}

simdjson::dom::parser& thread_parser() {
  thread_local simdjson::dom::parser parser;
  return parser;
}

std::string& thread_buffer() {
  thread_local std::string buffer;
  return buffer;
}

simdjson::simdjson_result<element> parse(std::string_view body) {
  std::string& buffer = thread_buffer();
  buffer.assign(body);
  buffer.append(simdjson::SIMDJSON_PADDING, ' ');
  return thread_parser().parse(buffer.data(), body.size(), false);
}

// The thread's parser and copy grow to the largest body parsed (a few times its size). Legit
// bodies stay far below kKeepBytes (10,000 rows are ~2 MB); after a larger one both are freed,
// so a burst of huge bodies does not stay resident on every I/O thread. Destroy it only once
// no element of the parsed document is in use.
class ReleaseLargeBuffers {
 public:
  explicit ReleaseLargeBuffers(std::size_t body_bytes) : large_(body_bytes > kKeepBytes) {}
  ~ReleaseLargeBuffers() {
    if (large_) {
      thread_parser() = simdjson::dom::parser();
      thread_buffer() = std::string();
    }
  }
  ReleaseLargeBuffers(const ReleaseLargeBuffers&) = delete;
  ReleaseLargeBuffers& operator=(const ReleaseLargeBuffers&) = delete;

 private:
  static constexpr std::size_t kKeepBytes = 4 * 1024 * 1024;
  const bool large_;
};

}  // namespace

bool parse_bulk_fast(std::string_view body, std::size_t min_rows, std::size_t max_rows,
                     std::vector<features::FeatureInput>& rows, std::size_t* too_many_rows) {
  rows.clear();
  const ReleaseLargeBuffers release(body.size());
  element root;
  if (parse(body).get(root) || !root.is_object()) {
    return false;
  }
  simdjson::dom::object obj = root;
  std::size_t found = 0;
  simdjson::dom::array arr;
  for (auto [key, v] : obj) {
    if (key == "requests") {
      ++found;
      if (v.get_array().get(arr)) {
        return false;
      }
    }
  }
  // A duplicate key is legal JSON with "last wins" semantics: leave it to the slow path.
  if (found != 1 || arr.size() < min_rows) {
    return false;
  }
  if (arr.size() > max_rows) {
    if (too_many_rows != nullptr) {
      *too_many_rows = arr.size();
    }
    return false;
  }
  rows.resize(arr.size());
  std::size_t i = 0;
  for (element e : arr) {
    simdjson::dom::object row;
    if (e.get_object().get(row) || !read_row(row, rows[i++])) {
      return false;
    }
  }
  return true;
}

bool parse_columns_fast(std::string_view body, std::size_t max_rows,
                        std::vector<features::FeatureInput>& rows, ColumnsTooLong* too_long) {
  rows.clear();
  const ReleaseLargeBuffers release(body.size());
  element root;
  if (parse(body).get(root) || !root.is_object()) {
    return false;
  }
  constexpr std::size_t kFields = features::kFeatureFields.size();
  std::array<element, kFields> values;
  std::array<std::size_t, kFields> lengths{};
  uint32_t seen = 0;
  uint32_t lists = 0;
  for (auto [key, v] : simdjson::dom::object(root)) {
    const int i = features::feature_field_index(key);
    if (i < 0) {
      continue;
    }
    const uint32_t bit = 1u << i;
    if ((seen & bit) != 0) {
      return false;  // a duplicate key is legal JSON ("last wins"): the slow path's
    }
    seen |= bit;
    values[static_cast<std::size_t>(i)] = v;
    simdjson::dom::array list;
    if (!v.get_array().get(list)) {
      lists |= bit;
      lengths[static_cast<std::size_t>(i)] = list.size();
    }
  }
  if ((seen & kRequired) != kRequired) {
    return false;
  }
  // The row count: the first list's length in the schema's order (the slow path's rule), or
  // one row when every field is a single value.
  std::size_t n = 1;
  std::string_view first_list;
  for (std::size_t i = 0; i < kFields; ++i) {
    if ((lists & (1u << i)) == 0) {
      continue;
    }
    if (first_list.empty()) {
      first_list = features::kFeatureFields[i].name;
      n = lengths[i];
    } else if (lengths[i] != n) {
      return false;
    }
  }
  if (n == 0) {
    return false;
  }
  if (n > max_rows) {
    if (too_long != nullptr) {
      *too_long = {first_list, n};
    }
    return false;
  }
  rows.resize(n);
  for (std::size_t i = 0; i < kFields; ++i) {
    if ((seen & (1u << i)) == 0) {
      continue;
    }
    const auto& f = features::kFeatureFields[i];
    if ((lists & (1u << i)) == 0) {
      if (!read_value(f, values[i], rows[0])) {
        return false;
      }
      for (std::size_t r = 1; r < n; ++r) {
        features::copy_field(f, rows[0], rows[r]);
      }
      continue;
    }
    std::size_t r = 0;
    for (element item : simdjson::dom::array(values[i])) {
      if (!read_value(f, item, rows[r++])) {
        return false;
      }
    }
  }
  return true;
}

bool parse_row_fast(std::string_view body, features::FeatureInput& row) {
  const ReleaseLargeBuffers release(body.size());
  element root;
  if (parse(body).get(root) || !root.is_object()) {
    return false;
  }
  return read_row(simdjson::dom::object(root), row);
}

}  // namespace llmd::predictor
