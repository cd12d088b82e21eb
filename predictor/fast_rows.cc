#include "predictor/fast_rows.h"

#include <simdjson.h>

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

enum Field : uint32_t {
  kKv = 1, kInput = 2, kWaiting = 4, kRunning = 8, kGenerated = 16, kPrefix = 32,
};
constexpr uint32_t kRequired = kKv | kInput | kWaiting | kRunning | kGenerated | kPrefix;

bool read_row(simdjson::dom::object obj, features::FeatureInput& f) {
  f = features::FeatureInput{};
  uint32_t seen = 0;
  for (auto [key, v] : obj) {
    bool ok = true;
    if (key == "kv_cache_percentage") {
      ok = read_unit(v, f.kv_cache_percentage);
      seen |= kKv;
    } else if (key == "input_token_length") {
      ok = read_count(v, f.input_token_length);
      seen |= kInput;
    } else if (key == "num_request_waiting") {
      ok = read_count(v, f.num_request_waiting);
      seen |= kWaiting;
    } else if (key == "num_request_running") {
      ok = read_count(v, f.num_request_running);
      seen |= kRunning;
    } else if (key == "num_tokens_generated") {
      ok = read_count(v, f.num_tokens_generated);
      seen |= kGenerated;
    } else if (key == "prefix_cache_score") {
      ok = read_unit(v, f.prefix_cache_score);
      seen |= kPrefix;
    } else if (key == "prefill_tokens_in_flight") {
      ok = read_count(v, f.prefill_tokens_in_flight);
    } else if (key == "decode_tokens_in_flight") {
      ok = read_count(v, f.decode_tokens_in_flight);
    } else if (key == "encoder_matched_size") {
      ok = read_count(v, f.encoder_matched_size);
    } else if (key == "encoder_input_size") {
      ok = read_count(v, f.encoder_input_size);
    } else if (key == "pod_type") {
      if (v.is_null()) {
        f.pod_type = features::PodType::kNone;
      } else if (v.is_string()) {
        f.pod_type = features::pod_type_from_string(std::string_view(v));
      } else {
        ok = false;
      }
    }
    if (!ok) {
      return false;
    }
  }
  return seen == kRequired;
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

bool parse_row_fast(std::string_view body, features::FeatureInput& row) {
  const ReleaseLargeBuffers release(body.size());
  element root;
  if (parse(body).get(root) || !root.is_object()) {
    return false;
  }
  return read_row(simdjson::dom::object(root), row);
}

}  // namespace llmd::predictor
