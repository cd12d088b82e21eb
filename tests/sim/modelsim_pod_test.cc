// modelsim without sockets: request parsing and formatting, fault parsing, the scaled clock and
// the Pod (engine + SSE/JSON answers + faults) driven with explicit wall times and a fake stream.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench/loadclient/openai.h"
#include "bench/loadclient/sse.h"
#include "bench/modelsim/fault.h"
#include "bench/modelsim/openai_protocol.h"
#include "bench/modelsim/pod.h"
#include "bench/modelsim/sim_clock.h"

namespace llmd::modelsim {
namespace {

using Json = nlohmann::json;

// Records what the pod answered.
class FakeStream final : public http::ResponseStream {
 public:
  void respond(http::Response r) override { response = std::move(r); }
  void begin_stream(int s, std::string ct, std::vector<http::Header>) override {
    status = s;
    content_type = std::move(ct);
  }
  void write(std::string d) override {
    body += d;
    ++writes;
  }
  std::size_t buffered() const override { return 0; }
  void when_drained(std::size_t, std::function<void()> cb) override { cb(); }
  void end() override { ended = true; }
  void close_connection() override { closed = true; }
  void end_incomplete() override { closed = true; }
  void on_disconnect(std::function<void()> cb) override { disconnect = std::move(cb); }

  std::optional<http::Response> response;
  int status = 0;
  std::string content_type;
  std::string body;
  int writes = 0;
  bool ended = false;
  bool closed = false;
  std::function<void()> disconnect;
};

InferenceRequest parse_ok(bool chat, const std::string& body) {
  auto r = parse_inference_request(chat, body, ProtocolConfig{});
  EXPECT_TRUE(std::holds_alternative<InferenceRequest>(r)) << body;
  return std::get<InferenceRequest>(r);
}

PodConfig exact_pod(double time_scale = 1.0) {
  PodConfig c;
  c.engine.profile.jitter_sigma = 0;
  c.time_scale = time_scale;
  return c;
}

// Advances the pod in 1 ms wall steps until `done` or the limit.
template <typename Done>
double run_until(Pod& pod, double t, Done done, double limit_ms = 100000) {
  while (!done() && t < limit_ms) {
    t += 1;
    pod.advance(t);
  }
  return t;
}

TEST(ModelsimProtocol, ParsesCompletionsAndChat) {
  auto c = parse_ok(false, R"({"prompt":"a b  c","max_tokens":4,"stream":true,
                               "stream_options":{"include_usage":true},"priority":-2})");
  EXPECT_EQ(c.prompt_tokens.size(), 3u);
  EXPECT_EQ(c.max_tokens, 4);
  EXPECT_TRUE(c.stream);
  EXPECT_TRUE(c.include_usage);
  EXPECT_EQ(c.priority, -2);
  // Chat: each message's text followed by one space, parts joined.
  auto chat = parse_ok(true, R"({"messages":[{"role":"system","content":"x y"},
      {"role":"user","content":[{"type":"text","text":"z"},{"type":"image_url"}]}]})");
  EXPECT_EQ(chat.prompt_tokens, sim::tokenize("x y z"));
  EXPECT_EQ(chat.max_tokens, ProtocolConfig{}.default_max_tokens);

  auto bad = [](bool chat_api, const std::string& body) {
    auto r = parse_inference_request(chat_api, body, ProtocolConfig{});
    EXPECT_TRUE(std::holds_alternative<ProtocolError>(r)) << body;
    return std::holds_alternative<ProtocolError>(r) ? std::get<ProtocolError>(r) : ProtocolError{};
  };
  EXPECT_EQ(bad(false, "{nope").status, 400);
  EXPECT_EQ(bad(false, R"({"prompt":""})").status, 400);
  EXPECT_EQ(bad(false, R"({"prompt":"a","max_tokens":0})").status, 400);
  EXPECT_EQ(bad(false, R"({"prompt":"a","stream_options":{"include_usage":true}})").status, 400);
  EXPECT_EQ(bad(true, R"({"messages":[]})").status, 400);
  EXPECT_EQ(bad(false, R"({"prompt":"a","model":"other"})").status, 404);
  // Booleans as vLLM's pydantic models read them: strings and 0/1 too, nothing else.
  auto lax = parse_ok(false, R"({"prompt":"a","stream":"true",
                                 "stream_options":{"include_usage":"False"}})");
  EXPECT_TRUE(lax.stream);
  EXPECT_FALSE(lax.include_usage);
  EXPECT_TRUE(parse_ok(false, R"({"prompt":"a","stream":1})").stream);
  EXPECT_EQ(bad(false, R"({"prompt":"a","stream":"maybe"})").param, "stream");
  // OpenAI's error object (not vLLM's legacy {"object":"error"}): param names the field,
  // code is a string or null.
  auto e = Json::parse(error_response(bad(false, "[1,")).body);
  ASSERT_TRUE(e.contains("error")) << e;
  EXPECT_FALSE(e.contains("object"));
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(e["error"]["param"].is_null());
  EXPECT_TRUE(e["error"]["code"].is_null());
  auto field = Json::parse(error_response(bad(false, R"({"prompt":"a","max_tokens":0})")).body);
  EXPECT_EQ(field["error"]["param"], "max_tokens");
  auto model = Json::parse(error_response(bad(false, R"({"prompt":"a","model":"x"})")).body);
  EXPECT_EQ(model["error"]["code"], "model_not_found");
  EXPECT_EQ(Json::parse(error_response(500, "boom").body)["error"]["type"], "server_error");
  // Prompt forms vLLM rejects too.
  for (const char* b : {R"({"prompt":[]})", R"({"prompt":[[]]})", R"({"prompt":[1,"a"]})",
                        R"({"prompt":[-1]})", R"({"prompt":["a",7]})", R"({"prompt":{}})"}) {
    EXPECT_EQ(bad(false, b).status, 400) << b;
    EXPECT_EQ(bad(false, b).param, "prompt") << b;
  }
}

// vLLM's completions prompt forms: token ids, lists of token-id lists, lists of strings. A
// batch answers one choice per prompt.
TEST(ModelsimProtocol, AcceptsTokenIdAndMultiPromptForms) {
  auto ok = [](const std::string& body) {
    auto r = parse_inference_request(false, body, ProtocolConfig{});
    EXPECT_TRUE(std::holds_alternative<InferenceRequest>(r)) << body;
    return std::holds_alternative<InferenceRequest>(r) ? std::get<InferenceRequest>(r)
                                                       : InferenceRequest{};
  };
  const auto ids = ok(R"({"prompt":[1,2,3]})");
  EXPECT_EQ(ids.prompt_tokens.size(), 3u);
  EXPECT_EQ(ids.prompts, 1);
  const auto nested = ok(R"({"prompt":[[1,2,3]]})");
  EXPECT_EQ(nested.prompt_tokens, ids.prompt_tokens);
  EXPECT_EQ(nested.prompts, 1);
  const auto two_ids = ok(R"({"prompt":[[1,2],[3,4,5]]})");
  EXPECT_EQ(two_ids.prompt_tokens.size(), 5u);
  EXPECT_EQ(two_ids.prompts, 2);
  const auto two_texts = ok(R"({"prompt":["a b","c"]})");
  EXPECT_EQ(two_texts.prompt_tokens, sim::tokenize("a b c"));
  EXPECT_EQ(two_texts.prompts, 2);
  ResponseFormatter f(false, "cmpl-1", 100, "m", 2);
  const Json full = Json::parse(f.full_response(" a", {5, 1, 0}));
  ASSERT_EQ(full["choices"].size(), 2u);
  EXPECT_EQ(full["choices"][1]["index"], 1);
  EXPECT_EQ(full["choices"][1]["text"], " a");
  EXPECT_EQ(full["usage"]["completion_tokens"], 2);
  const std::string chunks = f.token_chunk(" w", false);
  EXPECT_NE(chunks.find("\"index\":0"), std::string::npos);
  EXPECT_NE(chunks.find("\"index\":1"), std::string::npos);
}

TEST(ModelsimProtocol, FormatsChunksLikeVllm) {
  ResponseFormatter f(false, "cmpl-1", 100, "m");
  const auto chunk = f.token_chunk(" w", true);
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  ASSERT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  auto j = Json::parse(chunk.substr(6));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], " w");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  auto u = Json::parse(f.usage_chunk({10, 3, 8}).substr(6));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 13);
  EXPECT_EQ(u["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  ResponseFormatter chat(true, "chatcmpl-1", 100, "m");
  EXPECT_EQ(Json::parse(chat.role_chunk().substr(6))["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(Json::parse(chat.full_response(" a", {1, 1, 0}))["choices"][0]["message"]["content"],
            " a");
}

TEST(ModelsimFault, ParsesModes) {
  auto f =
      std::get<FaultSpec>(parse_fault(R"({"mode":"close","duration_ms":50,"after_tokens":2})"));
  EXPECT_EQ(f.mode, FaultMode::kClose);
  EXPECT_EQ(f.duration_ms, 50);
  EXPECT_EQ(f.after_tokens, 2);
  EXPECT_TRUE(std::holds_alternative<std::string>(parse_fault(R"({"mode":"explode"})")));
  EXPECT_TRUE(
      std::holds_alternative<std::string>(parse_fault(R"({"mode":"stall","duration_ms":-1})")));
  EXPECT_TRUE(std::holds_alternative<std::string>(parse_fault("[]")));
}

TEST(ModelsimClock, ScalesAndFreezes) {
  SimClock c(10, 1000);
  EXPECT_DOUBLE_EQ(c.sim(1000), 0);
  EXPECT_DOUBLE_EQ(c.sim(1005), 50);
  EXPECT_DOUBLE_EQ(c.wall_at(80), 1008);
  c.freeze(1010);
  EXPECT_DOUBLE_EQ(c.sim(2000), 100);
  EXPECT_EQ(c.wall_at(120), std::numeric_limits<double>::infinity());
  c.thaw(3000);
  EXPECT_DOUBLE_EQ(c.sim(3001), 110);
}

TEST(ModelsimPod, StreamsSseWithUsageAndCachedTokensOnRepeat) {
  Pod pod(exact_pod(), 0);
  const std::string body = R"({"prompt":")" + std::string(200, 'x') + [] {
    std::string words;
    for (int i = 0; i < 99; ++i) {
      words += " w" + std::to_string(i);
    }
    return words;
  }() + R"(","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}})";
  auto run_once = [&](double t0) {
    auto s = std::make_shared<FakeStream>();
    EXPECT_NE(pod.handle_inference(parse_ok(false, body), "r", s, 1, t0), 0u);
    EXPECT_EQ(s->status, 200);
    EXPECT_EQ(s->content_type.rfind("text/event-stream", 0), 0u);
    run_until(pod, t0, [&] { return s->ended; });
    return s;
  };
  auto first = run_once(0);
  std::vector<std::string> events;
  loadclient::SseParser parser([&](std::string_view d) { events.emplace_back(d); });
  parser.feed(first->body);
  ASSERT_EQ(events.size(), 7u);  // 5 tokens, usage, [DONE]
  EXPECT_EQ(events.back(), "[DONE]");
  loadclient::ResponseAccumulator acc;
  for (const auto& e : events) {
    acc.on_event(e, 0);
  }
  EXPECT_TRUE(acc.done());
  EXPECT_EQ(acc.finish_reason(), "length");
  EXPECT_EQ(acc.prompt_tokens(), 100);
  EXPECT_EQ(acc.completion_tokens(), 5);
  EXPECT_EQ(acc.cached_tokens(), 0);
  EXPECT_EQ(acc.content_chunks(), 5);

  auto second = run_once(1000);
  loadclient::ResponseAccumulator acc2;
  loadclient::SseParser p2([&](std::string_view d) { acc2.on_event(d, 0); });
  p2.feed(second->body);
  EXPECT_EQ(acc2.cached_tokens(), 96);  // 6 full blocks of the 100-token prompt
  EXPECT_EQ(acc2.text(), acc.text());   // same prompt, same synthetic answer
}

TEST(ModelsimPod, NonStreamingAnswerCarriesUsage) {
  Pod pod(exact_pod(), 0);
  auto s = std::make_shared<FakeStream>();
  pod.handle_inference(parse_ok(true, R"({"messages":[{"role":"user","content":"a b c"}],
                                        "max_tokens":3})"),
                       "id1", s, 1, 0);
  run_until(pod, 0, [&] { return s->response.has_value(); });
  ASSERT_TRUE(s->response);
  EXPECT_EQ(s->response->status, 200);
  auto j = Json::parse(s->response->body);
  EXPECT_EQ(j["id"], "chatcmpl-id1");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(loadclient::ResponseAccumulator().done(), false);
}

TEST(ModelsimPod, TimeScaleSpeedsUpTheEngine) {
  Pod slow(exact_pod(1), 0);
  Pod fast(exact_pod(10), 0);
  auto a = std::make_shared<FakeStream>();
  auto b = std::make_shared<FakeStream>();
  const auto req = R"({"prompt":"a b c","max_tokens":20})";
  slow.handle_inference(parse_ok(false, req), "a", a, 1, 0);
  fast.handle_inference(parse_ok(false, req), "b", b, 1, 0);
  const double t_slow = run_until(slow, 0, [&] { return a->response.has_value(); });
  const double t_fast = run_until(fast, 0, [&] { return b->response.has_value(); });
  EXPECT_NEAR(t_slow, 20 * 5.0, 2);  // 20 steps of ~5 ms
  EXPECT_NEAR(t_fast, t_slow / 10, 2);
}

TEST(ModelsimPod, FaultsStallErrorAndClose) {
  Pod pod(exact_pod(), 0);
  const auto req = R"({"prompt":"a b c","max_tokens":50,"stream":true})";
  // Error: answered at once with vLLM's error JSON.
  pod.set_fault({FaultMode::kError, 100, 0}, 0);
  auto e = std::make_shared<FakeStream>();
  EXPECT_EQ(pod.handle_inference(parse_ok(false, req), "e", e, 1, 0), 0u);
  ASSERT_TRUE(e->response);
  EXPECT_EQ(e->response->status, 500);
  EXPECT_EQ(pod.health(1).status, 500);
  EXPECT_EQ(pod.fault_mode(100), FaultMode::kNone);  // expired
  EXPECT_EQ(pod.health(100).status, 200);

  // Close at once.
  pod.set_fault({FaultMode::kClose, 0, 0}, 100);
  auto c = std::make_shared<FakeStream>();
  EXPECT_EQ(pod.handle_inference(parse_ok(false, req), "c", c, 1, 100), 0u);
  EXPECT_TRUE(c->closed);
  // Close mid-stream after 3 chunks: the engine request is aborted.
  pod.set_fault({FaultMode::kClose, 0, 3}, 100);
  auto m = std::make_shared<FakeStream>();
  EXPECT_NE(pod.handle_inference(parse_ok(false, req), "m", m, 1, 100), 0u);
  run_until(pod, 100, [&] { return m->closed; });
  EXPECT_TRUE(m->closed);
  EXPECT_FALSE(m->ended);
  EXPECT_EQ(pod.engine().metrics().requests_aborted, 1);
  pod.set_fault({FaultMode::kNone, 0, 0}, 200);

  // Stall: the engine clock freezes; held work runs when the stall ends.
  auto s = std::make_shared<FakeStream>();
  pod.handle_inference(parse_ok(false, req), "s", s, 1, 200);
  pod.advance(230);
  const auto before = s->writes;
  EXPECT_GT(before, 0);
  pod.set_fault({FaultMode::kStall, 500, 0}, 230);
  bool released = false;
  pod.hold([&] { released = true; });
  pod.advance(700);
  EXPECT_EQ(s->writes, before);
  EXPECT_FALSE(released);
  EXPECT_EQ(pod.next_wakeup(), 730);  // the stall's end
  pod.advance(730);
  EXPECT_TRUE(released);
  run_until(pod, 730, [&] { return s->ended; });
  EXPECT_TRUE(s->ended);
}

TEST(ModelsimPod, ClientGoneAbortsAndMetricsUseVllmNames) {
  Pod pod(exact_pod(), 0);
  auto s = std::make_shared<FakeStream>();
  const uint64_t key = pod.handle_inference(
      parse_ok(false, R"({"prompt":"a b c","max_tokens":500,"stream":true})"), "x", s, 1, 0);
  pod.advance(50);
  auto text = pod.metrics(50).body;
  EXPECT_NE(
      text.find("vllm:num_requests_running{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1"),
      std::string::npos)
      << text;
  for (const char* name :
       {"vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
        "vllm:cache_config_info{", "num_gpu_blocks=\"32000\"", "block_size=\"16\"",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:time_to_first_token_seconds_bucket", "vllm:time_per_output_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket", "vllm:request_queue_time_seconds_bucket"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
  pod.client_gone(key, 60);
  EXPECT_TRUE(pod.engine().idle());
  EXPECT_EQ(pod.engine().metrics().requests_aborted, 1);
  pod.advance(100);  // the step in flight when the client left still ends
  EXPECT_EQ(pod.next_wakeup(), std::numeric_limits<double>::infinity());
}

}  // namespace
}  // namespace llmd::modelsim
