#include "epp/plugins/common/params.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace llmd::epp {

ParamReader::ParamReader(const nlohmann::json& params) : params_(params) {
  if (!params_.is_null() && !params_.is_object()) {
    fail("parameters must be a mapping, got " + std::string(params_.type_name()));
  }
}

const nlohmann::json* ParamReader::find(std::string_view key, std::string_view alias) {
  seen_.emplace(key);
  if (!alias.empty()) {
    seen_.emplace(alias);
  }
  if (!params_.is_object()) {
    return nullptr;
  }
  auto it = params_.find(std::string(key));
  auto ia = alias.empty() ? params_.end() : params_.find(std::string(alias));
  if (it != params_.end() && ia != params_.end()) {
    fail("parameters '" + std::string(key) + "' and '" + std::string(alias) +
         "' are the same setting; give one");
    return nullptr;
  }
  if (it != params_.end()) {
    return &*it;
  }
  return ia != params_.end() ? &*ia : nullptr;
}

void ParamReader::fail(std::string message) {
  if (error_.empty()) {
    error_ = std::move(message);
  }
}

ParamReader& ParamReader::get(std::string_view key, double& out, std::string_view alias) {
  if (const auto* v = find(key, alias)) {
    if (!v->is_number()) {
      fail("parameter '" + std::string(key) + "' must be a number, got " + v->dump());
    } else if (!std::isfinite(v->get<double>())) {
      fail("parameter '" + std::string(key) + "' must be finite");
    } else {
      out = v->get<double>();
    }
  }
  return *this;
}

ParamReader& ParamReader::get(std::string_view key, int64_t& out, std::string_view alias) {
  if (const auto* v = find(key, alias)) {
    if (v->is_number_integer()) {
      out = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9.0e15) {
      out = static_cast<int64_t>(v->get<double>());  // 200.0 is accepted as 200
    } else {
      fail("parameter '" + std::string(key) + "' must be an integer, got " + v->dump());
    }
  }
  return *this;
}

ParamReader& ParamReader::get(std::string_view key, bool& out, std::string_view alias) {
  if (const auto* v = find(key, alias)) {
    if (!v->is_boolean()) {
      fail("parameter '" + std::string(key) + "' must be true or false, got " + v->dump());
    } else {
      out = v->get<bool>();
    }
  }
  return *this;
}

ParamReader& ParamReader::get(std::string_view key, std::string& out, std::string_view alias) {
  if (const auto* v = find(key, alias)) {
    if (!v->is_string()) {
      fail("parameter '" + std::string(key) + "' must be a string, got " + v->dump());
    } else {
      out = v->get<std::string>();
    }
  }
  return *this;
}

ParamReader& ParamReader::get(std::string_view key, std::chrono::nanoseconds& out,
                              std::string_view alias) {
  if (const auto* v = find(key, alias)) {
    if (v->is_number_integer()) {
      out = std::chrono::nanoseconds(v->get<int64_t>());
    } else if (auto d = v->is_string() ? parse_go_duration(v->get<std::string>()) : std::nullopt) {
      out = *d;
    } else {
      fail("parameter '" + std::string(key) +
           "' must be a duration such as \"5m\" or \"250ms\" (or integer nanoseconds), got " +
           v->dump());
    }
  }
  return *this;
}

ParamReader& ParamReader::get(std::string_view key, nlohmann::json& out, std::string_view alias) {
  if (const auto* v = find(key, alias)) {
    out = *v;
  }
  return *this;
}

bool ParamReader::has(std::string_view key) const {
  return params_.is_object() && params_.contains(std::string(key));
}

std::string ParamReader::finish() const {
  if (!error_.empty()) {
    return error_;
  }
  if (params_.is_object()) {
    for (const auto& [key, value] : params_.items()) {
      if (seen_.find(key) == seen_.end()) {
        std::string known;
        for (const auto& k : seen_) {
          known += (known.empty() ? "" : ", ") + k;
        }
        return "unknown parameter '" + key + "' (known: " + (known.empty() ? "none" : known) + ")";
      }
    }
  }
  return {};
}

std::optional<std::chrono::nanoseconds> parse_go_duration(std::string_view text) {
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s == "0") {
    return std::chrono::nanoseconds(0);
  }
  if (s.empty()) {
    return std::nullopt;
  }
  static const std::pair<std::string_view, double> kUnits[] = {
      {"ns", 1},   {"us", 1e3}, {"\u00b5s", 1e3}, {"\u03bcs", 1e3},
      {"ms", 1e6}, {"s", 1e9},  {"m", 60e9},      {"h", 3600e9}};
  double total = 0;
  while (!s.empty()) {
    std::size_t i = 0;
    bool digits = false;
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) {
      digits = digits || s[i] != '.';
      ++i;
    }
    if (!digits) {
      return std::nullopt;
    }
    const double value = std::strtod(std::string(s.substr(0, i)).c_str(), nullptr);
    s.remove_prefix(i);
    std::size_t u = 0;
    while (u < s.size() && !std::isdigit(static_cast<unsigned char>(s[u])) && s[u] != '.') {
      ++u;
    }
    const std::string_view unit = s.substr(0, u);
    const auto it = std::find_if(std::begin(kUnits), std::end(kUnits),
                                 [&](const auto& k) { return k.first == unit; });
    if (it == std::end(kUnits)) {
      return std::nullopt;
    }
    total += value * it->second;
    s.remove_prefix(u);
  }
  if (total > 9.2e18) {
    return std::nullopt;
  }
  return std::chrono::nanoseconds(static_cast<int64_t>(negative ? -total : total));
}

std::string param_error(std::string_view key, double value, std::string_view what) {
  std::ostringstream os;
  os << "parameter '" << key << "' must be " << what << ", got " << value;
  return os.str();
}

}  // namespace llmd::epp
