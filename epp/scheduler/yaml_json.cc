#include "epp/scheduler/yaml_json.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace llmd::epp {

namespace {

// YAML 1.2 core schema for plain scalars; quoted scalars (tag "!") stay strings.
nlohmann::json scalar_to_json(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() != "?") {
    return s;
  }
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") {
    return nullptr;
  }
  if (s == "true" || s == "True" || s == "TRUE") {
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    return false;
  }
  bool numeric_chars = std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.' ||
           c == 'e' || c == 'E';
  });
  if (numeric_chars) {
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(s.c_str(), &end, 10);
    if (errno == 0 && end == s.c_str() + s.size()) {
      return static_cast<int64_t>(i);
    }
    errno = 0;
    double d = std::strtod(s.c_str(), &end);
    if (errno == 0 && end == s.c_str() + s.size() && std::isfinite(d)) {
      return d;
    }
  }
  return s;
}

}  // namespace

nlohmann::json yaml_to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      return scalar_to_json(n);
    case YAML::NodeType::Sequence: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& item : n) {
        a.push_back(yaml_to_json(item));
      }
      return a;
    }
    case YAML::NodeType::Map: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& kv : n) {
        o[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      }
      return o;
    }
    default:
      return nullptr;
  }
}

}  // namespace llmd::epp
