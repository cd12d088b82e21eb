#pragma once
// A strict, allocation-free JSON scanner for the predictor answers (wire.cc): it validates
// what it steps over (strings, escapes, numbers, literals, nesting up to kMaxDepth) and hands
// out only what a reader asks for. nlohmann's SAX parser took ~7 ms for a 10,000-row strict
// answer; this takes a fraction of that. Keys are compared raw, so an escaped spelling of a
// key does not count (the predictor never escapes its keys). Included by wire.cc only.
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace llmd::epp::predictor_client {

class JsonScanner {
 public:
  static constexpr int kMaxDepth = 64;

  explicit JsonScanner(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

  const char* pos() const { return p_; }
  std::size_t remaining() const { return static_cast<std::size_t>(end_ - p_); }
  void skip(std::size_t n) { p_ += n; }
  bool at_end() const { return p_ == end_; }

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
  // ws ':' ws
  bool colon() {
    ws();
    if (!consume(':')) {
      return false;
    }
    ws();
    return true;
  }

  // At '{': each member's key to `value(key)`, which reads (or skips) the value and returns
  // false when it is malformed; true after the closing '}'.
  template <typename ReadValue>
  bool members(ReadValue&& value) {
    if (!consume('{')) {
      return false;
    }
    ws();
    if (consume('}')) {
      return true;
    }
    while (true) {
      std::string_view key;
      ws();
      if (!string(&key) || !colon() || !value(key)) {
        return false;
      }
      ws();
      if (consume('}')) {
        return true;
      }
      if (!consume(',')) {
        return false;
      }
    }
  }

  // At '"': the raw text between the quotes (escapes validated, not decoded). Runs of plain
  // characters are skipped through a table: most of a strict answer's bytes are the metadata
  // strings every prediction repeats.
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

 private:
  // Characters a string may hold as they are: not '"', not '\\', not a control character.
  static constexpr auto kPlain = [] {
    std::array<bool, 256> t{};
    for (int c = 0x20; c < 256; ++c) {
      t[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
    }
    return t;
  }();

  bool digits() {
    const char* begin = p_;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
      ++p_;
    }
    return p_ != begin;
  }
  bool literal(std::string_view word) {
    if (remaining() < word.size() || std::string_view(p_, word.size()) != word) {
      return false;
    }
    p_ += word.size();
    return true;
  }

  const char* p_;
  const char* end_;
};

}  // namespace llmd::epp::predictor_client
