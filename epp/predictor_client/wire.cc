#include "epp/predictor_client/wire.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstring>
#include <cstdint>


namespace llmd::epp::predictor_client {

namespace {

void append_double(std::string& out, double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), std::max<int64_t>(v, 0));
  out.append(buf, r.ptr);
}

double unit(double v) { return std::isfinite(v) ? std::clamp(v, 0.0, 1.0) : 0.0; }

// A strict, allocation-free reader for {"predictions":[{"ttft_ms":x,"tpot_ms":y,...},...],...}.
// It validates the whole document as JSON (strings, escapes, numbers, literals, nesting up to
// kMaxDepth) but keeps only the two numbers of each prediction; nlohmann's SAX parser took
// ~7 ms for a 10,000-row answer, this takes a fraction of that. ttft_expected_ms /
// tpot_expected_ms (our predictor's central estimates) are kept when present; a reference
// predictor sends none. Keys are compared raw, so an
// escaped spelling of "ttft_ms" does not count (the predictor never escapes its keys).
class BulkResponseReader {
 public:
  explicit BulkResponseReader(std::string_view body)
      : p_(body.data()), end_(body.data() + body.size()) {}

  std::optional<std::vector<Prediction>> read() {
    ws();
    if (!consume('{')) {
      return std::nullopt;
    }
    bool saw_predictions = false;
    ws();
    if (!consume('}')) {
      while (true) {
        std::string_view key;
        ws();
        if (!string(&key) || !colon()) {
          return std::nullopt;
        }
        if (key == "predictions") {
          saw_predictions = true;
          predictions_.clear();
          if (!prediction_array()) {
            return std::nullopt;
          }
        } else if (!skip_value(1)) {
          return std::nullopt;
        }
        ws();
        if (consume('}')) {
          break;
        }
        if (!consume(',')) {
          return std::nullopt;
        }
      }
    }
    ws();
    if (p_ != end_ || !saw_predictions) {
      return std::nullopt;
    }
    return std::move(predictions_);
  }

 private:
  static constexpr int kMaxDepth = 64;
  // Characters a string may hold as they are: not '"', not '\\', not a control character.
  static constexpr auto kPlain = [] {
    std::array<bool, 256> t{};
    for (int c = 0x20; c < 256; ++c) {
      t[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
    }
    return t;
  }();

  void ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) {
      ++p_;
    }
  }
  bool consume(char c) {
    if (p_ != end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool colon() {
    ws();
    if (!consume(':')) {
      return false;
    }
    ws();
    return true;
  }

  bool prediction_array() {
    if (!consume('[')) {
      return false;
    }
    ws();
    if (consume(']')) {
      return true;
    }
    while (true) {
      ws();
      if (!prediction()) {
        return false;
      }
      ws();
      if (consume(']')) {
        return true;
      }
      if (!consume(',')) {
        return false;
      }
    }
  }

  bool prediction() {
    if (!consume('{')) {
      return false;  // null (a failed row on the non-strict route), number, array...
    }
    Prediction out;
    int have = 0;
    // Where the object's trailing run of ignored members starts (null once a kept key follows).
    const char* ignored_from = nullptr;
    ws();
    if (!consume('}')) {
      while (true) {
        std::string_view key;
        ws();
        // Our predictor repeats the same metadata members (predicted_at, model_type, ...) at
        // the end of every prediction: when the bytes from here equal the previous
        // prediction's ignored tail, they parse the same way (the same members, all ignored,
        // then '}'), so they are stepped over instead of read again.
        if (!ignored_tail_.empty() && static_cast<std::size_t>(end_ - p_) >= ignored_tail_.size() &&
            std::memcmp(p_, ignored_tail_.data(), ignored_tail_.size()) == 0) {
          p_ += ignored_tail_.size();
          break;
        }
        const char* key_at = p_;
        if (!string(&key) || !colon()) {
          return false;
        }
        double* target = key == "ttft_ms"            ? &out.ttft_ms
                         : key == "tpot_ms"          ? &out.tpot_ms
                         : key == "ttft_expected_ms" ? &out.ttft_expected_ms
                         : key == "tpot_expected_ms" ? &out.tpot_expected_ms
                                                     : nullptr;
        if (target != nullptr) {
          if (!number(target)) {
            return false;
          }
          have |= target == &out.ttft_ms ? 1 : target == &out.tpot_ms ? 2 : 0;
          ignored_from = nullptr;
        } else {
          if (!skip_value(3)) {
            return false;
          }
          if (ignored_from == nullptr) {
            ignored_from = key_at;
          }
        }
        ws();
        if (consume('}')) {
          ignored_tail_ = ignored_from == nullptr
                              ? std::string_view()
                              : std::string_view(ignored_from, static_cast<std::size_t>(p_ - ignored_from));
          break;
        }
        if (!consume(',')) {
          return false;
        }
      }
    }
    if (have != 3) {
      return false;
    }
    predictions_.push_back(out);
    return true;
  }

  // At '"': the raw text between the quotes (escapes validated, not decoded). Runs of plain
  // characters are skipped through a table: every prediction carries its metadata strings
  // (predicted_at, model_type, ...), so most of a response's bytes are string contents.
  bool string(std::string_view* out) {
    if (!consume('"')) {
      return false;
    }
    const char* begin = p_;
    while (true) {
      while (p_ != end_ && kPlain[static_cast<unsigned char>(*p_)]) {
        ++p_;
      }
      if (p_ == end_) {
        return false;
      }
      const char c = *p_;
      if (c == '"') {
        *out = std::string_view(begin, static_cast<std::size_t>(p_ - begin));
        ++p_;
        return true;
      }
      if (c != '\\') {
        return false;  // a control character
      }
      ++p_;
      if (p_ == end_) {
        return false;
      }
      const char e = *p_;
      if (e == 'u') {
        for (int i = 0; i < 4; ++i) {
          ++p_;
          if (p_ == end_ || !std::isxdigit(static_cast<unsigned char>(*p_))) {
            return false;
          }
        }
      } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
        return false;
      }
      ++p_;
    }
  }

  // A JSON number (RFC 8259 grammar); stores its value when `out` is not null. Numbers of at
  // most 15 significant digits without an exponent part take Clinger's fast path: their digits
  // and the power of ten are exact doubles, so one IEEE division rounds exactly as from_chars
  // does (the predictor's *_expected_ms values, microsecond resolution); others go through
  // from_chars.
  bool number(double* out) {
    static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                        1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                        1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const char* begin = p_;
    const bool negative = consume('-');
    if (p_ == end_ || *p_ < '0' || *p_ > '9') {
      return false;
    }
    uint64_t mantissa = 0;  // wraps when long; then unused (significant > 15)
    int significant = 0;    // digits from the first non-zero one
    int scale = 0;          // digits after the point
    auto accumulate = [&] {
      const char* from = p_;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
        mantissa = mantissa * 10 + static_cast<uint64_t>(*p_ - '0');
        significant += mantissa != 0 ? 1 : 0;
        ++p_;
      }
      return static_cast<int>(p_ - from);
    };
    if (!consume('0')) {
      accumulate();  // no leading zeros: "01" stops after the "0" and fails in the caller
    }
    if (consume('.')) {
      scale = accumulate();
      if (scale == 0) {
        return false;
      }
    }
    bool exact = significant <= 15 && scale <= 22;
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (!consume('+')) {
        consume('-');
      }
      if (!digits()) {
        return false;
      }
      exact = false;
    }
    if (out == nullptr) {
      return true;
    }
    if (exact) {
      const double v = static_cast<double>(mantissa) / kPow10[scale];
      *out = negative ? -v : v;
      return true;
    }
    const auto r = std::from_chars(begin, p_, *out);
    return r.ec == std::errc() && r.ptr == p_ && std::isfinite(*out);
  }
  bool digits() {
    const char* begin = p_;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
      ++p_;
    }
    return p_ != begin;
  }
  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::string_view(p_, word.size()) != word) {
      return false;
    }
    p_ += word.size();
    return true;
  }

  // Any JSON value; `depth` is the nesting level of the value itself.
  bool skip_value(int depth) {
    if (depth > kMaxDepth || p_ == end_) {
      return false;
    }
    std::string_view ignored;
    switch (*p_) {
      case '"':
        return string(&ignored);
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      case '{':
      case '[': {
        const bool object = *p_ == '{';
        const char close = object ? '}' : ']';
        ++p_;
        ws();
        if (consume(close)) {
          return true;
        }
        while (true) {
          ws();
          if (object && (!string(&ignored) || !colon())) {
            return false;
          }
          if (!skip_value(depth + 1)) {
            return false;
          }
          ws();
          if (consume(close)) {
            return true;
          }
          if (!consume(',')) {
            return false;
          }
        }
      }
      default:
        return number(nullptr);
    }
  }

  const char* p_;
  const char* end_;
  std::vector<Prediction> predictions_;
  // The previous prediction's trailing ignored members up to its '}' (a view into the body).
  std::string_view ignored_tail_;
};

}  // namespace

void append_row_json(std::string& out, const features::FeatureInput& row) {
  out.append("{\"kv_cache_percentage\":");
  append_double(out, unit(row.kv_cache_percentage));
  out.append(",\"input_token_length\":");
  append_int(out, row.input_token_length);
  out.append(",\"num_request_waiting\":");
  append_int(out, row.num_request_waiting);
  out.append(",\"num_request_running\":");
  append_int(out, row.num_request_running);
  out.append(",\"num_tokens_generated\":");
  append_int(out, row.num_tokens_generated);
  out.append(",\"prefix_cache_score\":");
  append_double(out, unit(row.prefix_cache_score));
  out.append(",\"pod_type\":\"");
  // "" for none; kUnknown is written "unknown", which the predictor maps to the same
  // unknown category.
  out.append(features::pod_type_name(row.pod_type));
  out.append("\",\"prefill_tokens_in_flight\":");
  append_int(out, row.prefill_tokens_in_flight);
  out.append(",\"decode_tokens_in_flight\":");
  append_int(out, row.decode_tokens_in_flight);
  out.append(",\"encoder_matched_size\":");
  append_int(out, row.encoder_matched_size);
  out.append(",\"encoder_input_size\":");
  append_int(out, row.encoder_input_size);
  out.push_back('}');
}

std::string encode_bulk_request(std::span<const features::FeatureInput> rows) {
  std::string out;
  out.reserve(16 + rows.size() * 330);
  out.append("{\"requests\":[");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    append_row_json(out, rows[i]);
  }
  out.append("]}");
  return out;
}

std::optional<std::vector<Prediction>> parse_bulk_response(std::string_view body) {
  return BulkResponseReader(body).read();
}

}  // namespace llmd::epp::predictor_client
