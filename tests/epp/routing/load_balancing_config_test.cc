// The seed 002 config document: a full valid example, defaults, and one test per refusal.
#include "epp/routing/load_balancing_config.h"

#include <gtest/gtest.h>

namespace llmd::epp::routing {
namespace {

::testing::AssertionResult Contains(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "'" << text << "' lacks '" << part << "'";
}

std::string parse_error(std::string_view text) {
  auto parsed = parse_load_balancing_config_text(text);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    return *error;
  }
  ADD_FAILURE() << "expected an error for:\n" << text;
  return "";
}

// One rule `r1` with a single target, plus whatever `extra` adds to the rule.
std::string one_rule(std::string_view extra) {
  return "type: gateway-load-balancing-config\n"
         "rules:\n"
         "- id: r1\n"
         "  type: latency-based-routing\n"
         "  when: {models: [m]}\n"
         "  load_balance_targets: [{target: pool}]\n" +
         std::string(extra);
}

TEST(LoadBalancingConfigTest, ValidConfigParsesAllFields) {
  auto parsed = parse_load_balancing_config_text(R"(
type: gateway-load-balancing-config
settings: {windowSeconds: 600, windowRequests: 50, minSamples: 5, fastFactor: 1.5,
           failurePenaltyMs: 10000}
rules:
- id: llama-fast
  type: latency-based-routing
  when:
    models: [meta-llama/Llama-3.1-8B-Instruct, other]
    subjects: [team-a, team-b]
    metadata: {tier: gold, level: 2, beta: true}
  load_balance_targets:
  - target: pool:east
    override_params: {model: llama-east}
  - target: http://10.0.0.7:8000/openai/
  - target: http://upstream.local
  - target: pool
)");
  ASSERT_TRUE(std::holds_alternative<LoadBalancingConfig>(parsed)) << std::get<std::string>(parsed);
  const auto& config = std::get<LoadBalancingConfig>(parsed);
  EXPECT_EQ(config.settings.window, std::chrono::minutes(10));
  EXPECT_EQ(config.settings.window_requests, 50u);
  EXPECT_EQ(config.settings.min_samples, 5u);
  EXPECT_DOUBLE_EQ(config.settings.fast_factor, 1.5);
  EXPECT_DOUBLE_EQ(config.settings.failure_penalty_ms, 10000);
  ASSERT_EQ(config.rules.size(), 1u);
  const auto& rule = config.rules[0];
  EXPECT_EQ(rule.id, "llama-fast");
  EXPECT_EQ(rule.when.models,
            (std::vector<std::string>{"meta-llama/Llama-3.1-8B-Instruct", "other"}));
  EXPECT_EQ(rule.when.subjects, (std::vector<std::string>{"team-a", "team-b"}));
  EXPECT_EQ(rule.when.metadata, (std::map<std::string, std::string>{
                                    {"tier", "gold"}, {"level", "2"}, {"beta", "true"}}));
  ASSERT_EQ(rule.targets.size(), 4u);
  EXPECT_EQ(rule.targets[0].kind, LoadBalanceTarget::Kind::kPool);
  EXPECT_EQ(rule.targets[0].pool, "east");
  EXPECT_EQ(rule.targets[0].override_params, nlohmann::json({{"model", "llama-east"}}));
  EXPECT_EQ(rule.targets[1].kind, LoadBalanceTarget::Kind::kUrl);
  EXPECT_EQ(rule.targets[1].target, "http://10.0.0.7:8000/openai/");  // as written
  EXPECT_EQ(rule.targets[1].host, "10.0.0.7");
  EXPECT_EQ(rule.targets[1].port, 8000);
  EXPECT_EQ(rule.targets[1].base_path, "/openai");
  EXPECT_TRUE(rule.targets[1].override_params.is_null());
  EXPECT_EQ(rule.targets[2].host, "upstream.local");
  EXPECT_EQ(rule.targets[2].port, 80);
  EXPECT_EQ(rule.targets[2].base_path, "");
  EXPECT_EQ(rule.targets[3].kind, LoadBalanceTarget::Kind::kPool);
  EXPECT_EQ(rule.targets[3].pool, "");
}

TEST(LoadBalancingConfigTest, JsonTextAndPartialSettingsKeepDefaults) {
  auto parsed = parse_load_balancing_config_text(
      R"({"type": "gateway-load-balancing-config", "settings": {"fastFactor": 1.1},
          "rules": [{"id": "r", "type": "latency-based-routing", "when": {"models": ["m"]},
                     "load_balance_targets": [{"target": "pool:x"}]}]})");
  ASSERT_TRUE(std::holds_alternative<LoadBalancingConfig>(parsed)) << std::get<std::string>(parsed);
  const auto& s = std::get<LoadBalancingConfig>(parsed).settings;
  EXPECT_DOUBLE_EQ(s.fast_factor, 1.1);
  EXPECT_EQ(s.window, std::chrono::minutes(20));
  EXPECT_EQ(s.window_requests, 100u);
  EXPECT_EQ(s.min_samples, 3u);
  EXPECT_DOUBLE_EQ(s.failure_penalty_ms, 30000);
}

TEST(LoadBalancingConfigTest, EmptyRuleListIsValid) {
  auto parsed = parse_load_balancing_config_text("type: gateway-load-balancing-config\nrules: []");
  ASSERT_TRUE(std::holds_alternative<LoadBalancingConfig>(parsed));
  EXPECT_TRUE(std::get<LoadBalancingConfig>(parsed).rules.empty());
}

TEST(LoadBalancingConfigTest, UnknownRuleTypeNamesRuleAndSupportedType) {
  std::string text = one_rule("");
  text.replace(text.find("latency-based-routing"), 21, "round-robin");
  EXPECT_EQ(parse_error(text),
            "rule 'r1': unknown type 'round-robin' (supported: latency-based-routing)");
}

TEST(LoadBalancingConfigTest, RuleWithoutModelsIsRefused) {
  std::string text = one_rule("");
  text.replace(text.find("{models: [m]}"), 13, "{subjects: [a]}");
  EXPECT_TRUE(Contains(parse_error(text), "rule 'r1': 'when.models' is required"));
  text.replace(text.find("{subjects: [a]}"), 15, "{models: []}");
  EXPECT_TRUE(Contains(parse_error(text), "rule 'r1': 'when.models' must be a non-empty list"));
}

TEST(LoadBalancingConfigTest, RuleWithoutTargetsIsRefused) {
  std::string text = one_rule("");
  text.replace(text.find("[{target: pool}]"), 16, "[]");
  EXPECT_TRUE(Contains(parse_error(text), "rule 'r1': 'load_balance_targets' must be a non-empty"));
  text.erase(text.find("  load_balance_targets"));
  EXPECT_EQ(parse_error(text), "rule 'r1': missing 'load_balance_targets'");
}

TEST(LoadBalancingConfigTest, DuplicateIdsAreRefused) {
  std::string text = one_rule("");
  text += text.substr(text.find("- id: r1"));
  EXPECT_EQ(parse_error(text), "rule 'r1': duplicate id (rules[1])");
}

TEST(LoadBalancingConfigTest, RuleWithoutIdIsNamedByIndex) {
  std::string text = one_rule("");
  text += text.substr(text.find("- id: r1"));
  text.replace(text.rfind("- id: r1"), 8, "- id: ''");
  EXPECT_EQ(parse_error(text), "rules[1]: 'id' must be a non-empty string");
}

TEST(LoadBalancingConfigTest, HttpsTargetIsRefusedWithAdvice) {
  std::string text = one_rule("");
  text.replace(text.find("target: pool"), 12, "target: 'https://api.example.com'");
  std::string error = parse_error(text);
  EXPECT_TRUE(Contains(error, "rule 'r1'"));
  EXPECT_TRUE(Contains(error, "TLS upstreams are not supported"));
  EXPECT_TRUE(Contains(error, "TLS-terminating sidecar"));
}

TEST(LoadBalancingConfigTest, BadAndDuplicateTargetsAreRefused) {
  std::string text = one_rule("");
  text.replace(text.find("target: pool"), 12, "target: 'grpc://x'");
  EXPECT_EQ(parse_error(text),
            "rule 'r1': load_balance_targets[0]: target 'grpc://x': expected 'pool', "
            "'pool:<name>' or 'http://host[:port][/path]'");
  text = one_rule("");
  text.replace(text.find("[{target: pool}]"), 16, "[{target: pool}, {target: pool}]");
  EXPECT_EQ(parse_error(text), "rule 'r1': load_balance_targets[1]: duplicate target 'pool'");
}

TEST(LoadBalancingConfigTest, OverrideParamsMustBeAMapping) {
  std::string text = one_rule("");
  text.replace(text.find("{target: pool}"), 14, "{target: pool, override_params: [1]}");
  EXPECT_TRUE(Contains(parse_error(text), "rule 'r1': load_balance_targets[0]: 'override_params'"));
}

TEST(LoadBalancingConfigTest, UnknownKeysAreRefusedAtEveryLevel) {
  EXPECT_TRUE(
      Contains(parse_error(one_rule("  priority: 3\n")), "rule 'r1': unknown key 'priority'"));
  std::string when = one_rule("");
  when.replace(when.find("{models: [m]}"), 13, "{models: [m], model: x}");
  EXPECT_TRUE(Contains(parse_error(when), "rule 'r1': when: unknown key 'model'"));
  std::string target = one_rule("");
  target.replace(target.find("{target: pool}"), 14, "{target: pool, weight: 2}");
  EXPECT_TRUE(
      Contains(parse_error(target), "rule 'r1': load_balance_targets[0]: unknown key 'weight'"));
  EXPECT_TRUE(Contains(parse_error(one_rule("") + "extra: 1\n"), "unknown key 'extra'"));
  EXPECT_TRUE(Contains(parse_error(one_rule("") + "settings: {window: 5}\n"),
                       "settings: unknown key 'window'"));
}

TEST(LoadBalancingConfigTest, SettingsMustBeInRange) {
  EXPECT_TRUE(Contains(parse_error(one_rule("") + "settings: {fastFactor: 0.9}\n"),
                       "'fastFactor' must be a number >= 1"));
  EXPECT_TRUE(Contains(parse_error(one_rule("") + "settings: {minSamples: 0}\n"),
                       "'minSamples' must be an integer >= 1"));
  EXPECT_TRUE(Contains(parse_error(one_rule("") + "settings: {windowSeconds: 0}\n"),
                       "'windowSeconds' must be a number > 0"));
  EXPECT_TRUE(Contains(parse_error(one_rule("") + "settings: {failurePenaltyMs: -1}\n"),
                       "'failurePenaltyMs' must be a number > 0"));
  EXPECT_TRUE(Contains(parse_error(one_rule("") + "settings: {windowRequests: 2}\n"),
                       "'minSamples' (3) must not exceed 'windowRequests' (2)"));
}

TEST(LoadBalancingConfigTest, DocumentLevelErrors) {
  EXPECT_TRUE(Contains(parse_error("type: something-else\nrules: []"),
                       "'type' must be 'gateway-load-balancing-config'"));
  EXPECT_TRUE(Contains(parse_error("type: gateway-load-balancing-config\nrules: {}"),
                       "'rules' must be a list"));
  EXPECT_TRUE(Contains(parse_error("rules: [unclosed"), "not valid YAML/JSON"));
  EXPECT_TRUE(Contains(parse_error("- a list"), "must be a mapping"));
}

TEST(LoadBalancingConfigTest, MetadataValuesMustBeScalars) {
  std::string text = one_rule("");
  text.replace(text.find("{models: [m]}"), 13, "{models: [m], metadata: {tier: [a]}}");
  EXPECT_TRUE(Contains(parse_error(text), "rule 'r1': 'when.metadata.tier' must be a string"));
}

TEST(ParseTargetTest, AcceptedForms) {
  auto url = std::get<LoadBalanceTarget>(parse_target("http://[::1]:9000/v1//"));
  EXPECT_EQ(url.host, "::1");
  EXPECT_EQ(url.port, 9000);
  EXPECT_EQ(url.base_path, "/v1");
  auto bare = std::get<LoadBalanceTarget>(parse_target("http://h/"));
  EXPECT_EQ(bare.host, "h");
  EXPECT_EQ(bare.port, 80);
  EXPECT_EQ(bare.base_path, "");
  EXPECT_EQ(std::get<LoadBalanceTarget>(parse_target("pool:gpu-a100")).pool, "gpu-a100");
}

TEST(ParseTargetTest, RefusedForms) {
  for (const char* bad :
       {"", "pool:", "pools", "http://", "http://:80", "http://h:0", "http://h:99999", "http://h:x",
        "http://h:", "http://h/p?q=1", "http://user@h", "HTTPS://h", "ftp://h"}) {
    EXPECT_TRUE(std::holds_alternative<std::string>(parse_target(bad))) << bad;
  }
}

}  // namespace
}  // namespace llmd::epp::routing
