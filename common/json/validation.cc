#include "common/json/validation.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace llmd::json {
namespace {

std::string format_bound(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return fmt::format("{}", static_cast<int64_t>(v));
  }
  return fmt::format("{}", v);
}

// Records an error at `loc` + `field`, or at `loc` itself when `field` is empty (an item of a
// list, whose index `loc` already holds).
void record(Errors& errors, std::string_view type, const Loc& loc, std::string_view field,
            std::string_view msg, const Json& input) {
  if (field.empty()) {
    errors.add(type, loc, msg, input);
  } else {
    errors.add_at(type, loc, field, msg, input);
  }
}

bool check_range(double v, std::string_view field, const Loc& loc, Errors& errors,
                 NumberRange range, const Json& input) {
  if (range.ge && v < *range.ge) {
    record(errors, "greater_than_equal", loc, field,
           "Input should be greater than or equal to " + format_bound(*range.ge), input);
    return false;
  }
  if (range.le && v > *range.le) {
    record(errors, "less_than_equal", loc, field,
           "Input should be less than or equal to " + format_bound(*range.le), input);
    return false;
  }
  return true;
}

double float_value(const Json& v, const Loc& loc, std::string_view field, Errors& errors,
                   double fallback, NumberRange range) {
  if (!v.is_number()) {
    record(errors, "float_type", loc, field, "Input should be a valid number", v);
    return fallback;
  }
  const double d = v.get<double>();
  if (!std::isfinite(d)) {
    record(errors, "finite_number", loc, field, "Input should be a finite number", v);
    return fallback;
  }
  return check_range(d, field, loc, errors, range, v) ? d : fallback;
}

int64_t int_value(const Json& v, const Loc& loc, std::string_view field, Errors& errors,
                  int64_t fallback, NumberRange range) {
  int64_t out = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      record(errors, "int_parsing_size", loc, field,
             "Unable to parse input string as an integer, exceeded maximum size", v);
      return fallback;
    }
    out = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d)) {
      record(errors, "finite_number", loc, field, "Input should be a finite number", v);
      return fallback;
    }
    if (d != std::floor(d)) {
      record(errors, "int_from_float", loc, field,
             "Input should be a valid integer, got a number with a fractional part", v);
      return fallback;
    }
    if (std::fabs(d) > 9.0e18) {
      record(errors, "int_parsing_size", loc, field,
             "Unable to parse input string as an integer, exceeded maximum size", v);
      return fallback;
    }
    out = static_cast<int64_t>(d);
  } else {
    record(errors, "int_type", loc, field, "Input should be a valid integer", v);
    return fallback;
  }
  return check_range(static_cast<double>(out), field, loc, errors, range, v) ? out : fallback;
}

std::optional<std::string> optional_string_value(const Json& v, const Loc& loc,
                                                 std::string_view field, Errors& errors) {
  if (v.is_null()) {
    return std::nullopt;
  }
  if (!v.is_string()) {
    record(errors, "string_type", loc, field, "Input should be a valid string", v);
    return std::nullopt;
  }
  return v.get<std::string>();
}

// The echo of a client value in an error: itself when small, else a description of it.
Json bounded(const Json& input) {
  if (input.is_primitive() && !input.is_string()) {
    return input;
  }
  if (input.is_string()) {
    const auto& s = input.get_ref<const std::string&>();
    return s.size() <= Errors::kMaxInputBytes ? input
                                              : Json(s.substr(0, Errors::kMaxInputBytes) +
                                                     fmt::format("... ({} bytes)", s.size()));
  }
  // Containers: dump only when the element count makes a small dump possible.
  if (input.size() <= Errors::kMaxInputBytes / 2) {
    std::string text = input.dump();
    if (text.size() <= Errors::kMaxInputBytes) {
      return input;
    }
  }
  return Json(fmt::format("<{} with {} {}>", input.is_object() ? "object" : "array", input.size(),
                          input.is_object() ? "keys" : "elements"));
}

}  // namespace

Json Loc::to_json() const {
  Json out = Json::array();
  for (const auto& p : parts_) {
    if (const auto* s = std::get_if<std::string>(&p)) {
      out.push_back(*s);
    } else {
      out.push_back(std::get<int64_t>(p));
    }
  }
  return out;
}

bool Errors::full() {
  if (details_.size() < kMaxListed) {
    return false;
  }
  ++omitted_;
  return true;
}

void Errors::add(std::string_view type, const Loc& loc, std::string_view msg, const Json& input) {
  if (full()) {
    return;
  }
  details_.push_back(
      Json{{"type", type}, {"loc", loc.to_json()}, {"msg", msg}, {"input", bounded(input)}});
}

void Errors::add_raw(Json detail) {
  if (full()) {
    return;
  }
  if (auto it = detail.find("input"); it != detail.end()) {
    *it = bounded(*it);
  }
  details_.push_back(std::move(detail));
}

void Errors::add_at(std::string_view type, const Loc& loc, std::string_view field,
                    std::string_view msg, const Json& input) {
  if (full()) {
    return;
  }
  Json l = loc.to_json();
  l.push_back(field);
  details_.push_back(
      Json{{"type", type}, {"loc", std::move(l)}, {"msg", msg}, {"input", bounded(input)}});
}

Json Errors::body() const {
  if (omitted_ == 0) {
    return Json{{"detail", details_}};
  }
  Json all = details_;
  all.push_back(Json{{"type", "too_many_errors"},
                     {"loc", Json::array({"body"})},
                     {"msg", fmt::format("{} more errors not listed", omitted_)},
                     {"input", nullptr}});
  return Json{{"detail", std::move(all)}};
}

std::size_t find_excess_depth(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) {
          return i;
        }
        break;
      case ']':
      case '}':
        --depth;
        break;
      default:
        break;
    }
  }
  return std::string_view::npos;
}

void add_depth_error(std::size_t at, Errors& errors) {
  errors.add_raw(
      Json{{"type", "json_invalid"},
           {"loc", Json::array({"body", static_cast<int64_t>(at)})},
           {"msg", "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels"},
           {"input", Json::object()}});
}

void add_decode_error(const nlohmann::json::parse_error& e, Errors& errors) {
  errors.add_raw(Json{{"type", "json_invalid"},
                      {"loc", Json::array({"body", static_cast<int64_t>(e.byte)})},
                      {"msg", "JSON decode error"},
                      {"input", Json::object()},
                      {"ctx", {{"error", e.what()}}}});
}

void add_number_error(const nlohmann::json::exception& e, Errors& errors) {
  errors.add_raw(Json{{"type", "finite_number"},
                      {"loc", Json::array({"body"})},
                      {"msg", "Input should be a finite number"},
                      {"input", e.what()}});
}

std::optional<Json> parse_body(std::string_view body, Errors& errors) {
  if (const std::size_t at = find_excess_depth(body); at != std::string_view::npos) {
    add_depth_error(at, errors);
    return std::nullopt;
  }
  try {
    return Json::parse(body.begin(), body.end());
  } catch (const nlohmann::json::parse_error& e) {
    add_decode_error(e, errors);
    return std::nullopt;
  } catch (const nlohmann::json::exception& e) {
    // e.g. a number literal that overflows a double (1e999): not a finite number.
    add_number_error(e, errors);
    return std::nullopt;
  }
}

double read_float(const Json& obj, std::string_view field, Loc& loc, Errors& errors, bool required,
                  double fallback, NumberRange range) {
  auto it = obj.find(field);
  if (it == obj.end() || (!required && it->is_null())) {
    if (required) {
      errors.add_at("missing", loc, field, "Field required", obj);
    }
    return fallback;
  }
  return float_value(*it, loc, field, errors, fallback, range);
}

int64_t read_int(const Json& obj, std::string_view field, Loc& loc, Errors& errors, bool required,
                 int64_t fallback, NumberRange range) {
  auto it = obj.find(field);
  if (it == obj.end() || (!required && it->is_null())) {
    if (required) {
      errors.add_at("missing", loc, field, "Field required", obj);
    }
    return fallback;
  }
  return int_value(*it, loc, field, errors, fallback, range);
}

double check_float(const Json& value, const Loc& loc, Errors& errors, double fallback,
                   NumberRange range) {
  return float_value(value, loc, {}, errors, fallback, range);
}

int64_t check_int(const Json& value, const Loc& loc, Errors& errors, int64_t fallback,
                  NumberRange range) {
  return int_value(value, loc, {}, errors, fallback, range);
}

std::optional<std::string> check_optional_string(const Json& value, const Loc& loc,
                                                 Errors& errors) {
  return optional_string_value(value, loc, {}, errors);
}

bool read_bool(const Json& obj, std::string_view field, Loc& loc, Errors& errors, bool fallback) {
  auto it = obj.find(field);
  if (it == obj.end()) {
    return fallback;
  }
  if (!it->is_boolean()) {
    errors.add_at("bool_type", loc, field, "Input should be a valid boolean", *it);
    return fallback;
  }
  return it->get<bool>();
}

std::optional<std::string> read_optional_string(const Json& obj, std::string_view field, Loc& loc,
                                                Errors& errors) {
  auto it = obj.find(field);
  if (it == obj.end()) {
    return std::nullopt;
  }
  return optional_string_value(*it, loc, field, errors);
}

bool expect_object(const Json& value, Loc& loc, Errors& errors) {
  if (!value.is_object()) {
    errors.add("model_attributes_type", loc,
               "Input should be a valid dictionary or object to extract fields from", value);
    return false;
  }
  return true;
}

const Json* read_list(const Json& obj, std::string_view field, Loc& loc, Errors& errors,
                      std::size_t min_items, std::size_t max_items) {
  auto it = obj.find(field);
  if (it == obj.end()) {
    errors.add_at("missing", loc, field, "Field required", obj);
    return nullptr;
  }
  if (!it->is_array()) {
    errors.add_at("list_type", loc, field, "Input should be a valid list", *it);
    return nullptr;
  }
  if (it->size() < min_items) {
    errors.add_at("too_short", loc, field,
                  fmt::format("List should have at least {} item{} after validation, not {}",
                              min_items, min_items == 1 ? "" : "s", it->size()),
                  Json::array());
    return nullptr;
  }
  if (it->size() > max_items) {
    add_too_long(loc, field, max_items, it->size(), errors);
    return nullptr;
  }
  return &*it;
}

void add_too_long(const Loc& loc, std::string_view field, std::size_t max_items, std::size_t items,
                  Errors& errors) {
  errors.add_at(
      "too_long", loc, field,
      fmt::format("List should have at most {} items after validation, not {}", max_items, items),
      Json::array());
}

}  // namespace llmd::json
