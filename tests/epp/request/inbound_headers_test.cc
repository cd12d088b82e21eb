// The request headers under upstream's names: llm-d-router's current x-llm-d-* names and the
// old names the Inference Extension v1.5.0 sends, with llm-d-router's precedence.
#include <gtest/gtest.h>

#include <map>

#include "epp/request/openai_request.h"
#include "epp/request/inbound_headers.h"

namespace llmd::epp {
namespace {

InboundHeaders read(const std::map<std::string, std::string>& sent) {
  return read_inbound_headers([&sent](std::string_view name) -> std::optional<std::string> {
    auto it = sent.find(std::string(name));
    return it == sent.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

SchedulingRequest scheduled(const std::map<std::string, std::string>& sent,
                            const ObjectiveTable* objectives = nullptr) {
  ParsedRequest p;
  auto e = parse_openai_request("/v1/completions", R"({"model":"m","prompt":"x"})", read(sent),
                                RequestDefaults{true, objectives}, p);
  EXPECT_FALSE(e) << e.value_or("");
  return p.request;
}

TEST(InboundHeaders, LlmdNamesAndTheirOldNamesMeanTheSame) {
  auto current = scheduled({{"x-llm-d-slo-ttft-ms", "250"}, {"x-llm-d-slo-tpot-ms", "20"}});
  auto old = scheduled({{"x-slo-ttft-ms", "250"}, {"x-slo-tpot-ms", "20"}});
  for (const auto* r : {&current, &old}) {
    ASSERT_TRUE(r->slo_ttft_ms && r->slo_tpot_ms);
    EXPECT_EQ(*r->slo_ttft_ms, 250);
    EXPECT_EQ(*r->slo_tpot_ms, 20);
  }
  auto table = std::get<ObjectiveTable>(
      ObjectiveTable::parse(nlohmann::json::parse(R"([{"name": "batch", "priority": -1}])")));
  EXPECT_EQ(scheduled({{"x-llm-d-inference-objective", "batch"}}, &table).priority, -1);
  EXPECT_EQ(scheduled({{"x-gateway-inference-objective", "batch"}}, &table).priority, -1);
  EXPECT_EQ(scheduled({{"x-gateway-inference-objective", "batch"}}, &table).objective, "batch");
}

TEST(InboundHeaders, TheCurrentNameWinsOverTheOldOne) {
  auto r = scheduled(
      {{"x-llm-d-slo-ttft-ms", "100"}, {"x-slo-ttft-ms", "900"}, {"x-slo-tpot-ms", "30"}});
  EXPECT_EQ(*r.slo_ttft_ms, 100);
  EXPECT_EQ(*r.slo_tpot_ms, 30) << "each header on its own: the old name alone still counts";
  EXPECT_EQ(read({{"x-llm-d-inference-objective", "a"}, {"x-gateway-inference-objective", "b"}})
                .objective,
            "a");
  // As in llm-d-router, a present current name is the value even when empty: no SLO.
  EXPECT_FALSE(scheduled({{"x-llm-d-slo-ttft-ms", ""}, {"x-slo-ttft-ms", "900"}}).slo_ttft_ms);
}

TEST(InboundHeaders, AnErrorNamesTheHeaderTheClientSent) {
  auto error = [](const std::map<std::string, std::string>& sent) {
    ParsedRequest p;
    return parse_openai_request("/v1/completions", R"({"model":"m","prompt":"x"})", read(sent),
                                RequestDefaults{}, p)
        .value_or("");
  };
  EXPECT_NE(error({{"x-slo-tpot-ms", "fast"}}).find("header x-slo-tpot-ms must"),
            std::string::npos);
  EXPECT_NE(error({{"x-llm-d-slo-tpot-ms", "fast"}}).find("header x-llm-d-slo-tpot-ms must"),
            std::string::npos);
  EXPECT_NE(error({{"x-llm-d-slo-ttft-ms", "-5"}, {"x-slo-ttft-ms", "5"}})
                .find("header x-llm-d-slo-ttft-ms must"),
            std::string::npos);
}

TEST(InboundHeaders, ARequestIdIsMadeWhenAbsent) {
  EXPECT_EQ(read({{"x-request-id", "abc"}}).request_id, "abc");
  const std::string made = read({}).request_id;
  EXPECT_EQ(made.size(), 32u);
  EXPECT_NE(made, read({}).request_id);
}

}  // namespace
}  // namespace llmd::epp
