// Requests as upstream clients write them, through both ingresses of the real EPP (the proxy
// port and the gateway's ext_proc stream): llm-d-router's x-llm-d-* headers and the Inference
// Extension v1.5.0's old names set the same SLO and objective, the current name winning; a
// boolean written as a string ("stream": "true", the Inference Extension's latency guide does
// it) is read as vLLM reads it, and a value vLLM refuses is OpenAI's 400.
// docs/coming-from-upstream.md lists every upstream header and field beside ours.
#include <string>
#include <vector>

#include "tests/e2e/ext_proc_fixture.h"

namespace llmd::testing {
namespace {

class UpstreamRequests : public ExtProcStack {
 protected:
  void SetUp() override {
    StackOptions o;
    o.pods = 2;
    o.predictors = 1;
    o.epp_args = {"--allow-debug-header", "true"};
    o.extra_config = "objectives:\n- {name: batch, priority: -1, sloTtftMs: 900}\n";
    start_gateway_mode(o);
  }

  // The x-llmd-decision of one small completion through the proxy with `headers`.
  std::string proxy_decision(std::vector<http::Header> headers) {
    headers.push_back({"x-llmd-debug", "1"});
    auto r = stack_->complete(words(8, "slo"), 2, false, headers);
    EXPECT_EQ(r.status, 200) << r.body;
    return std::string(r.header("x-llmd-decision"));
  }

  // One request through the gateway (buffered body), the pod's answer relayed back: the EPP's
  // answer to the request body (the pick, or a refusal) and the decision it set on the response.
  struct GatewayResult {
    pb::ProcessingResponse answer;
    std::string forwarded;  // the body the gateway sends on to the pod
    std::string pod_body;   // the pod's answer
    std::string decision;
  };
  GatewayResult through_gateway(const std::string& body,
                                const std::vector<std::pair<std::string, std::string>>& headers) {
    GatewayResult out;
    GatewayExchange x(*stub_);
    pb::ProcessingRequest h = request_headers("/v1/completions", false);
    for (const auto& [k, v] : headers) {
      *h.mutable_request_headers()->mutable_headers()->add_headers() = header(k, v);
    }
    *h.mutable_request_headers()->mutable_headers()->add_headers() = header("x-llmd-debug", "1");
    EXPECT_TRUE(x.send(h));
    EXPECT_TRUE(x.receive());  // the headers' answer (BUFFERED: at once)
    EXPECT_TRUE(x.send(body_chunk(body, true)));
    auto answer = x.receive();
    EXPECT_TRUE(answer.has_value());
    if (!answer) {
      return out;
    }
    out.answer = *answer;
    if (!answer->has_request_body()) {
      x.finish();
      return out;  // an immediate response
    }
    const auto& common = answer->request_body().response();
    const std::string destination =
        mutation_value(common.header_mutation(), "x-gateway-destination-endpoint");
    out.forwarded = common.has_body_mutation() ? common.body_mutation().body() : body;
    auto pod = forward(destination, "/v1/completions", out.forwarded);
    EXPECT_EQ(pod.status, 200) << pod.body;
    out.pod_body = pod.body;
    EXPECT_TRUE(x.send(response_headers(pod.status, destination.substr(0, destination.find(',')))));
    auto rh = x.receive();
    EXPECT_TRUE(rh && rh->has_response_headers());
    if (rh) {
      out.decision =
          mutation_value(rh->response_headers().response().header_mutation(), "x-llmd-decision");
    }
    const auto events = sse_events(pod.body);
    for (std::size_t i = 0; i < events.size(); ++i) {
      EXPECT_TRUE(x.send(body_chunk(events[i], i + 1 == events.size(), /*response=*/true)));
      EXPECT_TRUE(x.receive());
    }
    EXPECT_TRUE(x.finish().ok());
    return out;
  }

  std::string completion(const std::string& tag, const Json& extra = Json::object()) {
    Json body = {{"model", stack_->model}, {"prompt", words(10, tag)}, {"max_tokens", 6}};
    body.update(extra);
    return body.dump();
  }
};

TEST_F(UpstreamRequests, LlmdHeadersAndTheirOldNamesSetTheSloAndObjectiveThroughTheProxy) {
  EXPECT_NE(proxy_decision({{"x-llm-d-slo-ttft-ms", "250"}, {"x-llm-d-slo-tpot-ms", "20"}})
                .find(" slo=ttft:250,tpot:20"),
            std::string::npos);
  EXPECT_NE(proxy_decision({{"x-slo-ttft-ms", "250"}, {"x-slo-tpot-ms", "20"}})
                .find(" slo=ttft:250,tpot:20"),
            std::string::npos);
  // Both spellings, different values: the x-llm-d-* one wins, and the debug log says so.
  const std::string both = proxy_decision(
      {{"x-request-id", "both-names"}, {"x-llm-d-slo-ttft-ms", "100"}, {"x-slo-ttft-ms", "900"}});
  EXPECT_NE(both.find(" slo=ttft:100"), std::string::npos) << both;
  EXPECT_NE(stack_->epp->log().find(
                "request both-names: header x-llm-d-slo-ttft-ms '100' wins over x-slo-ttft-ms "
                "'900'"),
            std::string::npos)
      << stack_->epp->log();
  // The objective under either name: its priority and its default SLO.
  for (const char* name : {"x-llm-d-inference-objective", "x-gateway-inference-objective"}) {
    const std::string d = proxy_decision({{name, "batch"}});
    EXPECT_NE(d.find(" slo=ttft:900 priority=-1"), std::string::npos) << name << ": " << d;
  }
  // A bad value is a 400 naming the header the client sent.
  auto bad = stack_->complete(words(4, "bad"), 2, false, {{"x-llm-d-slo-tpot-ms", "fast"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("x-llm-d-slo-tpot-ms"), std::string::npos) << bad.body;
}

TEST_F(UpstreamRequests, LlmdHeadersSetTheSloAndObjectiveThroughTheGateway) {
  auto r = through_gateway(
      completion("gw-slo"),
      {{"x-llm-d-slo-ttft-ms", "250"}, {"x-slo-ttft-ms", "900"}, {"x-slo-tpot-ms", "20"}});
  EXPECT_NE(r.decision.find(" slo=ttft:250,tpot:20"), std::string::npos) << r.decision;
  r = through_gateway(completion("gw-objective"), {{"x-llm-d-inference-objective", "batch"}});
  EXPECT_NE(r.decision.find(" slo=ttft:900 priority=-1"), std::string::npos) << r.decision;
}

TEST_F(UpstreamRequests, AStreamWrittenAsAStringStreamsThroughTheProxy) {
  const double streamed_before =
      metric_sum(stack_->metrics(), "inference_objective_request_ttft_seconds_count{");
  // The request of the Inference Extension's latency guide, as it writes it.
  auto r = stack_->client->request(
      "POST", "/v1/completions",
      completion("guide", {{"temperature", 0},
                           {"stream_options", {{"include_usage", "true"}}},
                           {"stream", "true"}}),
      "application/json", {{"x-llm-d-slo-ttft-ms", "5000"}, {"x-llm-d-slo-tpot-ms", "1000"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type").substr(0, 17), "text/event-stream");
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"usage\""), std::string::npos) << "include_usage \"true\": " << r.body;
  // The EPP measured it as a stream (a first token, a TTFT sample) against the header's SLO.
  std::string m;
  for (int i = 0; i < 50; ++i) {  // hang guard: the completion is recorded as it ends
    m = stack_->metrics();
    if (metric_sum(m, "inference_objective_request_ttft_seconds_count{") > streamed_before) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(metric_sum(m, "inference_objective_request_ttft_seconds_count{"), streamed_before + 1);
  EXPECT_EQ(metric_sum(m, "inference_objective_request_ttft_slo_threshold_seconds{"), 5.0) << m;

  // "false" written as a string is an ordinary JSON answer.
  auto plain = stack_->client->request("POST", "/v1/completions",
                                       completion("no-stream", {{"stream", "false"}}),
                                       "application/json", {});
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_TRUE(Json::parse(plain.body).contains("choices")) << plain.body;

  // What vLLM refuses, the EPP refuses: OpenAI's error object naming the field.
  auto maybe =
      stack_->client->request("POST", "/v1/completions", completion("maybe", {{"stream", "maybe"}}),
                              "application/json", {});
  ASSERT_EQ(maybe.status, 400) << maybe.body;
  const Json error = Json::parse(maybe.body)["error"];
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_EQ(error["param"], "stream");
  EXPECT_EQ(error["code"], "invalid_value");
  EXPECT_TRUE(error["message"].is_string());
}

TEST_F(UpstreamRequests, AStreamWrittenAsAStringStreamsThroughTheGateway) {
  const std::string body =
      completion("gw-guide", {{"stream_options", {{"include_usage", "true"}}}, {"stream", "true"}});
  auto r = through_gateway(body, {{"x-llm-d-slo-ttft-ms", "4000"}});
  ASSERT_TRUE(r.answer.has_request_body()) << r.answer.DebugString();
  EXPECT_EQ(r.forwarded, body) << "the body goes on to the pod as the client wrote it";
  EXPECT_NE(r.pod_body.find("data: [DONE]"), std::string::npos) << r.pod_body;
  EXPECT_NE(r.decision.find(" slo=ttft:4000"), std::string::npos) << r.decision;
  // The EPP read the relayed answer as a stream: TTFT and TPOT samples for the trainer.
  for (int i = 0; i < 100 && trainer_ingested(*stack_, "tpot") < 1; ++i) {  // hang guard: 10 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(trainer_ingested(*stack_, "ttft"), 1);
  EXPECT_EQ(trainer_ingested(*stack_, "tpot"), 1);

  auto maybe = through_gateway(completion("gw-maybe", {{"stream", "maybe"}}), {});
  ASSERT_TRUE(maybe.answer.has_immediate_response()) << maybe.answer.DebugString();
  EXPECT_EQ(maybe.answer.immediate_response().status().code(), 400);
  const Json error = Json::parse(maybe.answer.immediate_response().body())["error"];
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_EQ(error["param"], "stream");
  EXPECT_EQ(error["code"], "invalid_value");
}

}  // namespace
}  // namespace llmd::testing
