// Request-level policy inputs: objectives, priority sources and their precedence, routing
// headers, and the forwarded body (override_params, vLLM priority polarity).
#include <gtest/gtest.h>

#include "epp/request/openai_request.h"

namespace llmd::epp {
namespace {

using Json = nlohmann::json;

ObjectiveTable objectives() {
  auto t = ObjectiveTable::parse(Json::parse(R"([
    {"name": "interactive", "priority": 10, "strictPriority": 2, "sloTtftMs": 500, "sloTpotMs": 50},
    {"name": "batch", "priority": -1}])"));
  return std::get<ObjectiveTable>(t);
}

ParsedRequest parse(const std::string& body, const InboundHeaders& h,
                    const ObjectiveTable* table = nullptr) {
  ParsedRequest p;
  auto e = parse_openai_request("/v1/completions", body, h, RequestDefaults{true, table}, p);
  EXPECT_FALSE(e) << *e;
  return p;
}

const char* kPlain = R"({"model":"m","prompt":"a b c"})";
const char* kHinted = R"({"model":"m","prompt":"a b c","nvext":{"agent_hints":{"priority":3}}})";

TEST(Objectives, GiveDefaultsThatRequestValuesOverride) {
  ObjectiveTable t = objectives();
  InboundHeaders h;
  h.objective = "interactive";
  auto p = parse(kPlain, h, &t);
  EXPECT_EQ(p.request.priority, 10);
  EXPECT_EQ(p.request.strict_priority, 2);
  EXPECT_EQ(*p.request.slo_ttft_ms, 500);
  EXPECT_EQ(*p.request.slo_tpot_ms, 50);
  EXPECT_FALSE(p.unknown_objective);
  // Explicit SLO header and body hint win over the objective.
  h.slo_ttft_ms = "200";
  p = parse(kHinted, h, &t);
  EXPECT_EQ(p.request.priority, 3);
  EXPECT_EQ(*p.request.slo_ttft_ms, 200);
  EXPECT_EQ(*p.request.slo_tpot_ms, 50);
}

TEST(Objectives, NegativePriorityIsSheddableAndUnknownNamesAreDefaults) {
  ObjectiveTable t = objectives();
  InboundHeaders h;
  h.objective = "batch";
  EXPECT_TRUE(parse(kPlain, h, &t).request.sheddable());
  h.objective = "nope";
  auto p = parse(kPlain, h, &t);
  EXPECT_TRUE(p.unknown_objective);
  EXPECT_EQ(p.request.priority, 0);
  EXPECT_FALSE(p.request.slo_ttft_ms);
}

// The cluster's InferenceObjectives (discovery) laid over the file's: the CRD's priority wins
// its name, the file's SLO defaults and strict tier of that name stay, new names join.
TEST(Objectives, ClusterObjectivesSetThePriorityOfTheirName) {
  const ObjectiveTable file = objectives();
  const ObjectiveTable t = file.with_cluster(
      {{"interactive", 7}, {"batch", std::nullopt}, {"premium", 20}, {"plain", std::nullopt}});
  ASSERT_NE(t.find("interactive"), nullptr);
  EXPECT_EQ(t.find("interactive")->priority, 7);
  EXPECT_EQ(t.find("interactive")->strict_priority, 2);
  EXPECT_EQ(t.find("interactive")->slo_ttft_ms, 500);
  EXPECT_EQ(t.find("batch")->priority, -1) << "unset: the file's priority for that name";
  EXPECT_EQ(t.find("premium")->priority, 20);
  EXPECT_EQ(t.find("plain")->priority, 0) << "unset and not in the file: 0, as upstream";
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(file.find("interactive")->priority, 10) << "the file's table is left as it was";
  InboundHeaders h;
  h.objective = "premium";
  EXPECT_EQ(parse(kPlain, h, &t).request.priority, 20);
  EXPECT_FALSE(parse(kPlain, h, &t).unknown_objective);
}

TEST(Objectives, ConfigErrorsNameTheEntry) {
  auto bad = [](const char* doc) {
    auto r = ObjectiveTable::parse(Json::parse(doc));
    return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : std::string();
  };
  EXPECT_NE(bad(R"([{"priority": 1}])").find("objectives[0]"), std::string::npos);
  EXPECT_NE(bad(R"([{"name":"a","priority":1.5}])").find("objective 'a'"), std::string::npos);
  EXPECT_NE(bad(R"([{"name":"a","sloTtftMs":-1}])").find("sloTtftMs"), std::string::npos);
  EXPECT_NE(bad(R"([{"name":"a","strictPriority":-1}])").find("unsigned"), std::string::npos);
  EXPECT_NE(bad(R"([{"name":"a"},{"name":"a"}])").find("duplicate"), std::string::npos);
  EXPECT_NE(bad(R"([{"name":"a","sheddable":true}])").find("unknown key 'sheddable'"),
            std::string::npos);
  EXPECT_TRUE(std::holds_alternative<ObjectiveTable>(ObjectiveTable::parse(nullptr)));
}

TEST(PriorityHeaders, OverrideTheBodyHints) {
  InboundHeaders h;
  h.priority = "-4";
  h.strict_priority = "7";
  auto p = parse(kHinted, h);
  EXPECT_EQ(p.request.priority, -4);
  EXPECT_EQ(p.request.strict_priority, 7);
  ParsedRequest out;
  h.strict_priority = "-1";
  EXPECT_TRUE(parse_openai_request("/v1/completions", kPlain, h, {}, out));
  h.strict_priority = "x";
  EXPECT_TRUE(parse_openai_request("/v1/completions", kPlain, h, {}, out));
  EXPECT_TRUE(parse_openai_request(
      "/v1/completions", R"({"model":"m","prompt":"a","nvext":{"agent_hints":{"priority":"hi"}}})",
      InboundHeaders{}, {}, out));
  EXPECT_TRUE(parse_openai_request(
      "/v1/completions",
      R"({"model":"m","prompt":"a","nvext":{"agent_hints":{"strict_priority":-2}}})",
      InboundHeaders{}, {}, out));
}

TEST(RoutingHeaders, SubjectAndMetadata) {
  InboundHeaders h;
  h.subject = "team-a";
  h.metadata = R"({"tier":"gold","region":"eu"})";
  auto p = parse(kPlain, h);
  EXPECT_EQ(p.request.subject, "team-a");
  EXPECT_EQ(p.request.metadata.at("tier"), "gold");
  ParsedRequest out;
  h.metadata = "tier=gold";
  auto e = parse_openai_request("/v1/completions", kPlain, h, {}, out);
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("x-metadata"), std::string::npos);
  h.metadata = R"({"tier":1})";
  EXPECT_TRUE(parse_openai_request("/v1/completions", kPlain, h, {}, out));
}

TEST(UpstreamBody, UnchangedWithoutOverridesOrPriority) {
  auto p = parse(kPlain, {});
  EXPECT_FALSE(upstream_body(p, nullptr, true));
  EXPECT_EQ(target_model(p, nullptr), "m");
}

TEST(UpstreamBody, SoftPriorityIsForwardedInVllmPolarity) {
  auto p = parse(kHinted, {});  // priority 3: more important than 0
  auto body = Json::parse(*upstream_body(p, nullptr, true));
  EXPECT_EQ(body["priority"], -3);  // vLLM: lower value is served first
  EXPECT_EQ(body["nvext"]["agent_hints"]["priority"], 3);
  EXPECT_FALSE(upstream_body(p, nullptr, false));  // requests.forwardPriority: false
  InboundHeaders h;
  h.priority = "-2";  // less important than 0 -> a larger vLLM value
  EXPECT_EQ(Json::parse(*upstream_body(parse(kPlain, h), nullptr, true))["priority"], 2);
}

TEST(UpstreamBody, NeverNegatesTwice) {
  // The client already speaks vLLM: its own top-level priority is forwarded untouched.
  auto p = parse(R"({"model":"m","prompt":"a","priority":-5,
                     "nvext":{"agent_hints":{"priority":3}}})",
                 {});
  EXPECT_TRUE(p.vllm_priority_in_body);
  EXPECT_FALSE(upstream_body(p, nullptr, true));
  // Forwarding the already converted body again (EPP behind EPP) keeps the value.
  auto once = Json::parse(*upstream_body(parse(kHinted, {}), nullptr, true));
  auto again = parse(once.dump(), {});
  auto twice = upstream_body(again, nullptr, true);
  EXPECT_FALSE(twice);
}

TEST(UpstreamBody, OverrideParamsAreMergedAtTopLevel) {
  auto p = parse(kHinted, {});
  Json overrides = {{"model", "llama-east"}, {"temperature", 0}};
  auto body = Json::parse(*upstream_body(p, overrides, true));
  EXPECT_EQ(body["model"], "llama-east");
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["prompt"], "a b c");
  EXPECT_EQ(body["priority"], -3);
  EXPECT_EQ(target_model(p, overrides), "llama-east");
}

}  // namespace
}  // namespace llmd::epp
