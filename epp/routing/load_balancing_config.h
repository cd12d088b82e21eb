#pragma once
// The model-level routing document of seed 002 (spec epp.md section 5), decoded strictly into
// plain structs. Loaded on the config thread; the result is an immutable value.
//
//   type: gateway-load-balancing-config
//   settings: {windowSeconds: 1200, windowRequests: 100, minSamples: 3,   # optional, ours
//              fastFactor: 1.2, failurePenaltyMs: 30000}
//   rules:
//   - id: llama-fast
//     type: latency-based-routing
//     when: {models: [m], subjects: [team-a], metadata: {tier: gold}}  # subjects/metadata optional
//     load_balance_targets:
//     - {target: "pool:east", override_params: {model: llama-east}}
//     - {target: "http://10.0.0.7:8000/openai"}
//     - {target: pool}                                                   # the default pool
//
// Every error names the rule by id, or as `rules[i]` before its id is known. Unknown keys are
// errors at every level. Metadata values may be strings, numbers or booleans; numbers and
// booleans are compared as their JSON text (`tier: 1` matches header value "1").
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmd::epp::routing {

inline constexpr std::string_view kConfigType = "gateway-load-balancing-config";
inline constexpr std::string_view kLatencyRuleType = "latency-based-routing";

struct LoadBalanceTarget {
  enum class Kind { kPool, kUrl };
  std::string target;  // as written; the statistics key within its rule
  Kind kind = Kind::kPool;
  std::string pool;  // kPool: pool label value; "" = the default pool (pods without `pool`)
  std::string host;  // kUrl: name or address (IPv6 without brackets)
  uint16_t port = 80;
  std::string base_path;           // kUrl: "" or "/openai" (no trailing '/')
  nlohmann::json override_params;  // object merged into the forwarded body, or null
};

struct RuleCondition {
  std::vector<std::string> models;              // non-empty; exact match on the request's `model`
  std::vector<std::string> subjects;            // empty = any subject
  std::map<std::string, std::string> metadata;  // every pair must be in the request's metadata
};

struct LatencyRule {
  std::string id;
  RuleCondition when;
  std::vector<LoadBalanceTarget> targets;  // non-empty, distinct `target` strings
};

struct LatencyRoutingSettings {
  std::chrono::milliseconds window{std::chrono::minutes(20)};  // windowSeconds, > 0
  std::size_t window_requests = 100;                           // windowRequests, >= minSamples
  std::size_t min_samples = 3;                                 // minSamples, >= 1
  double fast_factor = 1.2;                                    // fastFactor, >= 1
  double failure_penalty_ms = 30000;                           // failurePenaltyMs, > 0
};

struct LoadBalancingConfig {
  std::vector<LatencyRule> rules;  // matched in this order
  LatencyRoutingSettings settings;
};

// The config or an error message. Never throws.
std::variant<LoadBalancingConfig, std::string> parse_load_balancing_config(
    const nlohmann::json& doc);
// YAML or JSON text (JSON is read as YAML flow style).
std::variant<LoadBalancingConfig, std::string> parse_load_balancing_config_text(
    std::string_view yaml_or_json);

// "pool", "pool:<name>" or "http://host[:port][/path]"; the error says what was expected.
// Leaves `override_params` untouched.
std::variant<LoadBalanceTarget, std::string> parse_target(std::string_view text);

}  // namespace llmd::epp::routing
