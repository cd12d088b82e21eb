#include "common/json/lax_bool.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace llmd::json {
namespace {

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
    if (c != b[i]) {
      return false;
    }
  }
  return true;
}

// pydantic-core's str_as_bool: "0" / "1" exactly, the words in any letter case.
std::optional<bool> string_as_bool(std::string_view s) {
  static constexpr std::array<std::string_view, 5> kFalse = {"f", "n", "no", "off", "false"};
  static constexpr std::array<std::string_view, 5> kTrue = {"t", "y", "on", "yes", "true"};
  if (s == "0") {
    return false;
  }
  if (s == "1") {
    return true;
  }
  for (auto w : kFalse) {
    if (equals_ignoring_case(s, w)) {
      return false;
    }
  }
  for (auto w : kTrue) {
    if (equals_ignoring_case(s, w)) {
      return true;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<bool> lax_bool(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::boolean:
      return value.get<bool>();
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t v = value.get<uint64_t>();
      return v <= 1 ? std::optional<bool>(v == 1) : std::nullopt;
    }
    case nlohmann::json::value_t::number_integer: {
      const int64_t v = value.get<int64_t>();
      return v == 0 || v == 1 ? std::optional<bool>(v == 1) : std::nullopt;
    }
    case nlohmann::json::value_t::number_float: {
      const double v = value.get<double>();
      return v == 0.0 || v == 1.0 ? std::optional<bool>(v == 1.0) : std::nullopt;
    }
    case nlohmann::json::value_t::string:
      return string_as_bool(value.get_ref<const std::string&>());
    default:
      return std::nullopt;
  }
}

}  // namespace llmd::json
