#include "epp/routing/load_balancing_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <initializer_list>
#include <optional>
#include <set>

#include <yaml-cpp/yaml.h>

#include "epp/scheduler/yaml_json.h"

namespace llmd::epp::routing {

namespace {

using nlohmann::json;
using Error = std::optional<std::string>;

std::string in_quotes(std::string_view s) {
  // Built by append: `"'" + std::string(s)` trips a GCC 12 -Wrestrict false positive.
  std::string out(1, '\'');
  out.append(s).push_back('\'');
  return out;
}

Error check_keys(const json& obj, std::string_view where,
                 std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string list;
      for (auto a : allowed) {
        list += (list.empty() ? "" : ", ") + std::string(a);
      }
      return std::string(where) + "unknown key " + in_quotes(key) + " (allowed: " + list + ")";
    }
  }
  return std::nullopt;
}

Error read_positive_int(const json& settings, const char* key, std::size_t& out) {
  auto it = settings.find(key);
  if (it == settings.end()) {
    return std::nullopt;
  }
  bool ok = it->is_number_unsigned() ? it->get<uint64_t>() >= 1
                                     : it->is_number_integer() && it->get<int64_t>() >= 1;
  if (!ok) {
    return "settings: " + in_quotes(key) + " must be an integer >= 1, got " + it->dump();
  }
  out = static_cast<std::size_t>(it->get<uint64_t>());
  return std::nullopt;
}

// `min_inclusive` false means the value must be strictly greater than `min`.
Error read_number(const json& settings, const char* key, double min, bool min_inclusive,
                  double& out) {
  auto it = settings.find(key);
  if (it == settings.end()) {
    return std::nullopt;
  }
  double v = it->is_number() ? it->get<double>() : std::nan("");
  if (!std::isfinite(v) || v < min || (!min_inclusive && v == min)) {
    return "settings: " + in_quotes(key) + " must be a number " + (min_inclusive ? ">= " : "> ") +
           json(min).dump() + ", got " + it->dump();
  }
  out = v;
  return std::nullopt;
}

Error parse_settings(const json& j, LatencyRoutingSettings& out) {
  if (!j.is_object()) {
    return "settings must be a mapping, got " + j.dump();
  }
  if (auto e = check_keys(
          j, "settings: ",
          {"windowSeconds", "windowRequests", "minSamples", "fastFactor", "failurePenaltyMs"})) {
    return e;
  }
  double window_s = static_cast<double>(out.window.count()) / 1000.0;
  for (Error e : {read_number(j, "windowSeconds", 0.0, false, window_s),
                  read_positive_int(j, "windowRequests", out.window_requests),
                  read_positive_int(j, "minSamples", out.min_samples),
                  read_number(j, "fastFactor", 1.0, true, out.fast_factor),
                  read_number(j, "failurePenaltyMs", 0.0, false, out.failure_penalty_ms)}) {
    if (e) {
      return e;
    }
  }
  out.window = std::chrono::milliseconds(std::max<int64_t>(1, std::llround(window_s * 1000.0)));
  if (out.min_samples > out.window_requests) {
    // Otherwise no target could ever be judged.
    return "settings: 'minSamples' (" + std::to_string(out.min_samples) +
           ") must not exceed 'windowRequests' (" + std::to_string(out.window_requests) + ")";
  }
  return std::nullopt;
}

Error read_string_list(const json& when, const char* key, std::vector<std::string>& out) {
  const json& list = when.at(key);
  bool ok = list.is_array() && !list.empty();
  for (const auto& item : list) {
    ok = ok && item.is_string() && !item.get_ref<const std::string&>().empty();
  }
  if (!ok) {
    return "'when." + std::string(key) + "' must be a non-empty list of non-empty strings";
  }
  for (const auto& item : list) {
    out.push_back(item.get<std::string>());
  }
  return std::nullopt;
}

Error parse_when(const json& j, RuleCondition& out) {
  if (!j.is_object()) {
    return std::string("'when' must be a mapping");
  }
  if (auto e = check_keys(j, "when: ", {"models", "subjects", "metadata"})) {
    return e;
  }
  if (!j.contains("models")) {
    return std::string("'when.models' is required (a rule matches requests by model)");
  }
  if (auto e = read_string_list(j, "models", out.models)) {
    return e;
  }
  if (j.contains("subjects")) {
    if (auto e = read_string_list(j, "subjects", out.subjects)) {
      return e;
    }
  }
  if (auto it = j.find("metadata"); it != j.end()) {
    if (!it->is_object()) {
      return std::string("'when.metadata' must be a mapping of key to value");
    }
    for (const auto& [key, value] : it->items()) {
      if (value.is_string()) {
        out.metadata[key] = value.get<std::string>();
      } else if (value.is_number() || value.is_boolean()) {
        out.metadata[key] = value.dump();  // `tier: 1` matches "1"
      } else {
        return "'when.metadata." + key + "' must be a string, number or boolean";
      }
    }
  }
  return std::nullopt;
}

bool is_host_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
}

bool is_ipv6_char(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
}

bool parse_port(std::string_view s, uint16_t& out) {
  if (s.empty() || s.size() > 5 ||
      !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  int v = std::stoi(std::string(s));
  if (v < 1 || v > 65535) {
    return false;
  }
  out = static_cast<uint16_t>(v);
  return true;
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), s.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

Error parse_url(std::string_view rest, LoadBalanceTarget& t) {
  constexpr auto npos = std::string_view::npos;
  auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == npos ? "" : rest.substr(slash);
  // The port follows the last ':' that is not inside IPv6 brackets.
  auto colon = authority.rfind(':');
  if (colon != npos && authority.find(']', colon) != npos) {
    colon = npos;
  }
  std::string_view host = authority.substr(0, colon);
  if (colon != npos && !parse_port(authority.substr(colon + 1), t.port)) {
    return "bad port " + in_quotes(authority.substr(colon + 1));
  }
  bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) {
    host = host.substr(1, host.size() - 2);
  }
  auto valid = bracketed ? is_ipv6_char : is_host_char;
  if (host.empty() || !std::all_of(host.begin(), host.end(), valid)) {
    return "bad host " + in_quotes(host);
  }
  t.host = std::string(host);
  if (path.find_first_of("?# \t") != std::string_view::npos) {
    return std::string("the base path cannot hold a query, fragment or space");
  }
  while (!path.empty() && path.back() == '/') {
    path.remove_suffix(1);
  }
  t.base_path = std::string(path);
  return std::nullopt;
}

Error parse_targets(const json& j, std::vector<LoadBalanceTarget>& out) {
  if (!j.is_array() || j.empty()) {
    return std::string("'load_balance_targets' must be a non-empty list");
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const json& item = j[i];
    std::string where = "load_balance_targets[" + std::to_string(i) + "]: ";
    if (!item.is_object()) {
      return where + "must be a mapping with 'target'";
    }
    if (auto e = check_keys(item, where, {"target", "override_params"})) {
      return e;
    }
    auto it = item.find("target");
    if (it == item.end() || !it->is_string()) {
      return where + "'target' must be a string";
    }
    auto parsed = parse_target(it->get<std::string>());
    if (auto* err = std::get_if<std::string>(&parsed)) {
      return where + *err;
    }
    auto target = std::get<LoadBalanceTarget>(std::move(parsed));
    if (!seen.insert(target.target).second) {
      return where + "duplicate target " + in_quotes(target.target);
    }
    if (auto op = item.find("override_params"); op != item.end()) {
      if (!op->is_object()) {
        return where + "'override_params' must be a mapping, got " + op->dump();
      }
      target.override_params = *op;
    }
    out.push_back(std::move(target));
  }
  return std::nullopt;
}

std::variant<LatencyRule, std::string> parse_rule(const json& j, std::size_t index) {
  std::string where = "rules[" + std::to_string(index) + "]: ";
  if (!j.is_object()) {
    return where + "must be a mapping";
  }
  auto id = j.find("id");
  bool id_ok = id != j.end() && id->is_string() && !id->get_ref<const std::string&>().empty();
  if (id_ok) {
    where = "rule " + in_quotes(id->get<std::string>()) + ": ";
  }
  if (auto e = check_keys(j, where, {"id", "type", "when", "load_balance_targets"})) {
    return *e;
  }
  if (!id_ok) {
    return where + "'id' must be a non-empty string";
  }
  LatencyRule rule;
  rule.id = id->get<std::string>();
  auto type = j.find("type");
  if (type == j.end()) {
    return where + "missing 'type' (supported: " + std::string(kLatencyRuleType) + ")";
  }
  if (!type->is_string() || type->get<std::string>() != kLatencyRuleType) {
    std::string got = type->is_string() ? type->get<std::string>() : type->dump();
    return where + "unknown type " + in_quotes(got) +
           " (supported: " + std::string(kLatencyRuleType) + ")";
  }
  if (!j.contains("when")) {
    return where + "missing 'when' (a rule matches requests by 'when.models')";
  }
  if (auto e = parse_when(j.at("when"), rule.when)) {
    return where + *e;
  }
  if (!j.contains("load_balance_targets")) {
    return where + "missing 'load_balance_targets'";
  }
  if (auto e = parse_targets(j.at("load_balance_targets"), rule.targets)) {
    return where + *e;
  }
  return rule;
}

}  // namespace

std::variant<LoadBalanceTarget, std::string> parse_target(std::string_view text) {
  LoadBalanceTarget t;
  t.target = std::string(text);
  if (text == "pool") {
    return t;
  }
  if (text.substr(0, 5) == "pool:") {
    t.pool = std::string(text.substr(5));
    if (t.pool.empty() || !std::all_of(t.pool.begin(), t.pool.end(), is_host_char)) {
      return "target " + in_quotes(text) + ": bad pool name (letters, digits, '.', '-', '_')";
    }
    return t;
  }
  if (starts_with_nocase(text, "https://")) {
    return "target " + in_quotes(text) +
           ": TLS upstreams are not supported; put a TLS-terminating sidecar in front of the "
           "upstream and target it with http://, or use a pool";
  }
  if (starts_with_nocase(text, "http://")) {
    t.kind = LoadBalanceTarget::Kind::kUrl;
    if (auto e = parse_url(text.substr(7), t)) {
      return "target " + in_quotes(text) + ": " + *e;
    }
    return t;
  }
  return "target " + in_quotes(text) +
         ": expected 'pool', 'pool:<name>' or 'http://host[:port][/path]'";
}

std::variant<LoadBalancingConfig, std::string> parse_load_balancing_config(const json& doc) {
  try {
    if (!doc.is_object()) {
      return "load-balancing config must be a mapping, got " + std::string(doc.type_name());
    }
    if (auto e = check_keys(doc, "", {"type", "settings", "rules"})) {
      return *e;
    }
    auto type = doc.find("type");
    if (type == doc.end() || !type->is_string() || type->get<std::string>() != kConfigType) {
      return "'type' must be " + in_quotes(kConfigType) + ", got " +
             (type == doc.end() ? std::string("nothing") : type->dump());
    }
    LoadBalancingConfig config;
    if (auto s = doc.find("settings"); s != doc.end()) {
      if (auto e = parse_settings(*s, config.settings)) {
        return *e;
      }
    }
    auto rules = doc.find("rules");
    if (rules == doc.end() || !rules->is_array()) {
      return std::string("'rules' must be a list");
    }
    std::set<std::string> ids;
    for (std::size_t i = 0; i < rules->size(); ++i) {
      auto rule = parse_rule((*rules)[i], i);
      if (auto* err = std::get_if<std::string>(&rule)) {
        return *err;
      }
      auto& r = std::get<LatencyRule>(rule);
      if (!ids.insert(r.id).second) {
        return "rule " + in_quotes(r.id) + ": duplicate id (rules[" + std::to_string(i) + "])";
      }
      config.rules.push_back(std::move(r));
    }
    return config;
  } catch (const std::exception& e) {  // defensive: the checks above should make this unreachable
    return std::string("load-balancing config: ") + e.what();
  }
}

std::variant<LoadBalancingConfig, std::string> parse_load_balancing_config_text(
    std::string_view yaml_or_json) {
  json doc;
  try {
    doc = yaml_to_json(YAML::Load(std::string(yaml_or_json)));
  } catch (const std::exception& e) {
    return std::string("load-balancing config is not valid YAML/JSON: ") + e.what();
  }
  return parse_load_balancing_config(doc);
}

}  // namespace llmd::epp::routing
