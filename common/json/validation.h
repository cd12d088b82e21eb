#pragma once
// Request validation that yields the contract's 422 body:
//   {"detail": [{"type", "loc", "msg", "input"}, ...]}
// with `loc` a path such as ["body","requests",1,"prefix_cache_score"]. Field readers append an
// error and return a default instead of throwing, so one pass reports every bad field.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmd::json {

using Json = nlohmann::json;

// A location path, materialised into JSON only when an error is recorded.
class Loc {
 public:
  Loc() { parts_.emplace_back(std::string("body")); }
  void push(std::string_view key) { parts_.emplace_back(std::string(key)); }
  void push(int64_t index) { parts_.emplace_back(index); }
  void pop() { parts_.pop_back(); }
  Json to_json() const;

 private:
  std::vector<std::variant<std::string, int64_t>> parts_;
};

// RAII push/pop of one path element.
class LocScope {
 public:
  template <typename T>
  LocScope(Loc& loc, T part) : loc_(loc) {
    loc_.push(part);
  }
  ~LocScope() { loc_.pop(); }
  LocScope(const LocScope&) = delete;
  LocScope& operator=(const LocScope&) = delete;

 private:
  Loc& loc_;
};

struct NumberRange {
  std::optional<double> ge;  // inclusive lower bound
  std::optional<double> le;  // inclusive upper bound
};

// The errors of one request. Bounded, whatever the request: at most kMaxListed details (then
// one "too_many_errors" detail with the count of the others), and each echoed `input` at most
// kMaxInputBytes of JSON (a larger one is replaced by a short description). A body of 100,000
// empty entries used to produce an 83 MB answer.
class Errors {
 public:
  static constexpr std::size_t kMaxListed = 50;
  static constexpr std::size_t kMaxInputBytes = 1024;

  void add(std::string_view type, const Loc& loc, std::string_view msg, const Json& input);
  void add_at(std::string_view type, const Loc& loc, std::string_view field, std::string_view msg,
              const Json& input);
  void add_raw(Json detail);
  bool empty() const { return details_.empty() && omitted_ == 0; }
  std::size_t size() const { return details_.size() + omitted_; }
  // {"detail": [...]}
  Json body() const;
  const Json& details() const { return details_; }

 private:
  bool full();  // counts the error as omitted when the list is full
  Json details_ = Json::array();
  std::size_t omitted_ = 0;
};

// Deepest nesting of objects and arrays any client JSON may have. Parsing is iterative, but
// copying, dumping and echoing a parsed value recurse once per level: a 200 KB body nested
// 100,000 deep overflows the stack. No request of any API here needs more than a handful.
inline constexpr int kMaxJsonDepth = 64;

// The offset of the first '[' or '{' that opens level `max_depth` + 1, or npos when the text
// never nests deeper than `max_depth` (strings and their escapes are skipped). A linear scan
// meant to run before parsing; malformed text is left to the parser.
std::size_t find_excess_depth(std::string_view text, int max_depth = kMaxJsonDepth);

// Parses a request body; on failure records a `json_invalid` error at ["body", offset] (also
// for nesting deeper than kMaxJsonDepth, checked before parsing).
std::optional<Json> parse_body(std::string_view body, Errors& errors);

// The errors parse_body records, for other parsers of client JSON (json/streaming.h): nesting
// deeper than kMaxJsonDepth at offset `at`; a syntax error (`json_invalid` at its byte); a
// number literal that is not a finite double (`finite_number`).
void add_depth_error(std::size_t at, Errors& errors);
void add_decode_error(const nlohmann::json::parse_error& e, Errors& errors);
void add_number_error(const nlohmann::json::exception& e, Errors& errors);

// Field readers on a JSON object. `required` missing -> "missing" error. Out-of-range,
// non-finite, wrong type -> the matching error. The return value is only meaningful when no
// error was added.
double read_float(const Json& obj, std::string_view field, Loc& loc, Errors& errors, bool required,
                  double fallback = 0.0, NumberRange range = {});
int64_t read_int(const Json& obj, std::string_view field, Loc& loc, Errors& errors, bool required,
                 int64_t fallback = 0, NumberRange range = {});
bool read_bool(const Json& obj, std::string_view field, Loc& loc, Errors& errors, bool fallback);
// String or null (null -> nullopt). Missing -> nullopt.
std::optional<std::string> read_optional_string(const Json& obj, std::string_view field, Loc& loc,
                                                Errors& errors);
// The checks of read_float / read_int / read_optional_string on a value found by the caller (an
// item of a list); an error is recorded at `loc` itself, which names the value.
double check_float(const Json& value, const Loc& loc, Errors& errors, double fallback = 0.0,
                   NumberRange range = {});
int64_t check_int(const Json& value, const Loc& loc, Errors& errors, int64_t fallback = 0,
                  NumberRange range = {});
std::optional<std::string> check_optional_string(const Json& value, const Loc& loc, Errors& errors);
// Checks that `value` is an object; records `model_type`-style error otherwise.
bool expect_object(const Json& value, Loc& loc, Errors& errors);
// Checks that obj[field] is a list with min..max items; records an error otherwise.
const Json* read_list(const Json& obj, std::string_view field, Loc& loc, Errors& errors,
                      std::size_t min_items, std::size_t max_items);
// The error read_list records for a list of `items` > `max_items` (for callers that counted the
// items without building the document).
void add_too_long(const Loc& loc, std::string_view field, std::size_t max_items, std::size_t items,
                  Errors& errors);

}  // namespace llmd::json
