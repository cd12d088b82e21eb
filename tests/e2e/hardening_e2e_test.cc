// Inputs built to crash a server, sent to the real binaries: each gets a 4xx and the server
// keeps serving.
#include <gtest/gtest.h>

#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

std::string nested(std::size_t depth) {
  return std::string(depth, '[') + "1" + std::string(depth, ']');
}

TEST(Hardening, DeeplyNestedJsonIsRefusedByEveryServer) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  Stack stack(o);
  ASSERT_TRUE(stack.ready) << stack.logs();
  const std::string deep = nested(100000);  // ~200 KB
  http::HttpClient trainer("127.0.0.1", stack.trainer->port);
  auto t = trainer.post("/add_training_data_bulk", "{\"entries\": " + deep + "}");
  EXPECT_EQ(t.status, 422) << t.body.substr(0, 300);
  EXPECT_LT(t.body.size(), 1000u) << "the error does not echo the input";
  http::HttpClient predictor("127.0.0.1", stack.predictor_ports[0]);
  auto p = predictor.post("/predict/bulk/strict",
                          "{\"requests\": [{\"kv_cache_percentage\": " + deep + "}]}");
  EXPECT_EQ(p.status, 422) << p.body.substr(0, 300);
  http::HttpClient epp("127.0.0.1", stack.epp_port);
  Json ok = {{"model", stack.model}, {"prompt", "hello"}, {"max_tokens", 2}};
  std::string deep_prompt = ok.dump();
  deep_prompt.replace(deep_prompt.find("\"hello\""), 7, deep);
  auto e = epp.post("/v1/completions", deep_prompt);
  EXPECT_EQ(e.status, 400) << e.body.substr(0, 300);
  std::string deep_extra = ok.dump();
  deep_extra.insert(deep_extra.size() - 1, ",\"nvext\":{},\"extra\":" + deep);
  EXPECT_EQ(epp.post("/v1/completions", deep_extra).status, 400);
  // Wrong types in fields the EPP reads: a 400 that names the field, on a live connection.
  for (const char* bad : {R"("stream": "yes")", R"("stream": 1)", R"("max_tokens": "8")"}) {
    auto r = epp.post("/v1/completions", "{\"model\": \"" + stack.model +
                                             "\", \"prompt\": \"hi\", " + bad + "}");
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
    EXPECT_NE(r.body.find("field '"), std::string::npos) << r.body;
  }
  auto part = epp.request("POST", "/v1/chat/completions",
                          "{\"model\": \"" + stack.model +
                              "\", \"messages\": [{\"role\": \"user\", \"content\": "
                              "[{\"type\": 5}]}]}");
  EXPECT_EQ(part.status, 400) << part.body;
  // Everyone is still up; 64 levels are still accepted where a field allows nesting.
  EXPECT_EQ(trainer.get("/healthz").status, 200);
  EXPECT_EQ(predictor.get("/healthz").status, 200);
  Json fine = ok;
  fine["extra"] = Json::parse(nested(60));
  EXPECT_EQ(epp.post("/v1/completions", fine.dump()).status, 200);
}

}  // namespace
}  // namespace llmd::testing
