#include "epp/discovery/pool_spec.h"

#include <nlohmann/json.hpp>

namespace llmd::epp::discovery {
namespace {

using Json = nlohmann::json;

std::string port_list(const std::vector<uint16_t>& ports) {
  std::string s;
  for (auto p : ports) {
    s += (s.empty() ? "" : ", ") + std::to_string(p);
  }
  return s;
}

std::string ports_text(const std::vector<uint16_t>& ports) {
  return (ports.size() > 1 ? "ports " : "port ") + port_list(ports);
}

}  // namespace

std::optional<PoolSpec> pool_spec_of(const Json& pool, uint16_t default_port, std::string& error) {
  const Json spec = pool.is_object() ? pool.value("spec", Json::object()) : Json::object();
  if (!spec.is_object()) {
    error = "InferencePool has no spec";
    return std::nullopt;
  }
  PoolSpec out;
  Json labels = spec.value("selector", Json::object());
  if (labels.is_object() && labels.contains("matchLabels")) {
    labels = labels["matchLabels"];  // v1
  }
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (v.is_string()) {
        out.selector[k] = v.get<std::string>();
      }
    }
  }
  if (out.selector.empty()) {
    error = "InferencePool has no selector";
    return std::nullopt;
  }
  if (auto listed = spec.find("targetPorts"); listed != spec.end() && listed->is_array()) {
    for (const auto& p : *listed) {
      const int number = p.is_object() && p.value("number", Json()).is_number_integer()
                             ? p["number"].get<int>()
                             : 0;
      if (number > 0 && number <= 65535) {
        out.ports.push_back(static_cast<uint16_t>(number));
      }
    }
  } else if (auto n = spec.find("targetPortNumber"); n != spec.end() && n->is_number_integer() &&
                                                     n->get<int>() > 0 && n->get<int>() <= 65535) {
    out.ports.push_back(static_cast<uint16_t>(n->get<int>()));
  }
  if (out.ports.empty()) {
    out.ports.push_back(default_port);
  }
  return out;
}

std::string selector_text(const std::map<std::string, std::string>& selector) {
  std::string s;
  for (const auto& [k, v] : selector) {
    s += (s.empty() ? "" : ",") + k + "=" + v;
  }
  return s;
}

std::string describe(const PoolSpec& spec) {
  return "selects " + selector_text(spec.selector) + " on " + ports_text(spec.ports);
}

std::string describe_change(const PoolSpec& before, const PoolSpec& after) {
  std::string s;
  if (before.selector != after.selector) {
    s = "selector " + selector_text(before.selector) + " -> " + selector_text(after.selector);
  }
  if (before.ports != after.ports) {
    s += (s.empty() ? "" : "; ") + std::string(after.ports.size() > 1 ? "ports " : "port ") +
         port_list(before.ports) + " -> " + port_list(after.ports);
  }
  return s;
}

}  // namespace llmd::epp::discovery
