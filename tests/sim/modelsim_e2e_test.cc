// End-to-end: a real modelsim process with several pods on loopback ports, driven by the load
// client library. Checks SSE framing, usage counts, cached_tokens on a repeated prompt, metrics
// moving with load, the client-disconnect abort and every injected fault. No timed assertions:
// waits are bounded polls; the simulated clock runs 20x faster than real time.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <future>
#include <random>
#include <memory>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/loadclient/load_runner.h"
#include "bench/loadclient/sse.h"
#include "bench/workload/workload.h"
#include "tests/support/process.h"

namespace llmd::testing {
namespace {

using Json = nlohmann::json;
using loadclient::fetch;
using loadclient::FetchResult;

constexpr int kPods = 3;

int64_t count_words(const std::string& s) {
  std::istringstream in(s);
  int64_t n = 0;
  for (std::string w; in >> w;) {
    ++n;
  }
  return n;
}

std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  loadclient::SseParser p([&](std::string_view d) { events.emplace_back(d); });
  p.feed(body);
  p.finish();
  return events;
}

// Value of an unlabelled-by-us sample `name{...}` in Prometheus text (first match).
double metric(const std::string& text, const std::string& name) {
  std::regex re("(^|\n)" +
                std::regex_replace(name, std::regex(R"([\[\]{}().*+?^$|\\])"), R"(\$&)") +
                R"((\{[^}]*\})? ([0-9.eE+-]+))");
  std::smatch m;
  if (!std::regex_search(text, m, re)) {
    return -1;
  }
  return std::stod(m[3]);
}

class ModelsimE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = free_port_block(kPods);
    ASSERT_NE(base_, 0);
    proc_ = std::make_unique<Process>(
        binary("bench/modelsim/modelsim"),
        std::vector<std::string>{"--pods", std::to_string(kPods), "--base-port",
                                 std::to_string(base_), "--host", "127.0.0.1", "--time-scale", "20",
                                 "--slow-pods", "1", "--jitter", "0", "--seed", "3",
                                 "--max-body-bytes", "65536", "--log-level", "warn"});
    for (int i = 0; i < kPods; ++i) {
      ASSERT_TRUE(proc_->wait_http_ok(port(i), "/health")) << proc_->log();
    }
  }
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "modelsim log:\n" << proc_->log() << std::endl;
    }
    EXPECT_EQ(proc_->terminate(), 0);
  }

  uint16_t port(int pod) const { return static_cast<uint16_t>(base_ + pod); }
  FetchResult post(int pod, const std::string& path, const Json& body,
                   std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    return fetch("127.0.0.1", port(pod), "POST", path, body.dump(), {}, timeout);
  }
  FetchResult get(int pod, const std::string& path,
                  std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    return fetch("127.0.0.1", port(pod), "GET", path, {}, {}, timeout);
  }
  Json state(int pod) { return Json::parse(get(pod, "/admin/state").body); }
  void fault(int pod, const Json& spec) {
    auto r = post(pod, "/admin/fault", spec);
    ASSERT_EQ(r.status, 200) << r.body;
  }

  static std::string words(int n, const std::string& salt) {
    return workload::words(std::hash<std::string>{}(salt), n);
  }

  uint16_t base_ = 0;
  std::unique_ptr<Process> proc_;
};

TEST_F(ModelsimE2E, StreamingCompletionHasVllmSseFramingAndUsage) {
  auto r = post(0, "/v1/completions",
                {{"prompt", words(40, "a")},
                 {"max_tokens", 12},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.header("content-type").rfind("text/event-stream", 0), 0u);
  EXPECT_TRUE(r.chunked);
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(r.header("x-modelsim-pod"), "0");
  EXPECT_GT(r.pieces.size(), 1u);  // tokens arrive over time, not in one piece

  // Framing: only "data: <payload>\n\n" events.
  std::size_t pos = 0;
  int framed = 0;
  while (pos < r.body.size()) {
    ASSERT_EQ(r.body.compare(pos, 6, "data: "), 0) << r.body.substr(pos, 40);
    const auto end = r.body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos);
    pos = end + 2;
    ++framed;
  }
  auto events = sse_events(r.body);
  ASSERT_EQ(static_cast<int>(events.size()), framed);
  ASSERT_EQ(events.size(), 12u + 2);  // tokens, usage, [DONE]
  EXPECT_EQ(events.back(), "[DONE]");
  for (int i = 0; i < 12; ++i) {
    auto j = Json::parse(events[static_cast<std::size_t>(i)]);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["finish_reason"], i == 11 ? Json("length") : Json(nullptr));
    EXPECT_EQ(j["choices"][0]["text"].get<std::string>().front(), ' ');
  }
  auto usage = Json::parse(events[12]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 40);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
  EXPECT_EQ(usage["usage"]["total_tokens"], 52);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  // Without include_usage there is no usage chunk.
  auto plain = post(0, "/v1/completions", {{"prompt", "x y"}, {"max_tokens", 3}, {"stream", true}});
  EXPECT_EQ(sse_events(plain.body).size(), 3u + 1);
}

TEST_F(ModelsimE2E, ChatAndNonStreamingResponsesCarryUsage) {
  auto chat = post(1, "/v1/chat/completions",
                   {{"messages",
                     {{{"role", "system"}, {"content", "be brief"}},
                      {{"role", "user"}, {"content", "hello there"}}}},
                    {"max_tokens", 4},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(chat.status, 200);
  auto events = sse_events(chat.body);
  ASSERT_EQ(events.size(), 1u + 4 + 2);  // role chunk, tokens, usage, [DONE]
  auto role = Json::parse(events[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(Json::parse(events[5])["usage"]["prompt_tokens"], 4);

  auto whole = post(1, "/v1/completions", {{"prompt", words(30, "b")}, {"max_tokens", 7}});
  ASSERT_EQ(whole.status, 200);
  EXPECT_EQ(whole.header("content-type"), "application/json");
  auto j = Json::parse(whole.body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 7);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 30);
  EXPECT_EQ(count_words(j["choices"][0]["text"].get<std::string>()), 7);

  auto models = Json::parse(get(1, "/v1/models").body);
  EXPECT_EQ(models["data"][0]["id"], "meta-llama/Llama-3.1-8B-Instruct");
}

TEST_F(ModelsimE2E, RepeatedPromptReportsCachedTokensPerPod) {
  const Json body = {{"prompt", words(100, "c")}, {"max_tokens", 2}};
  auto first = Json::parse(post(0, "/v1/completions", body).body);
  auto second = Json::parse(post(0, "/v1/completions", body).body);
  auto other_pod = Json::parse(post(1, "/v1/completions", body).body);
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], 96);    // 6 full blocks
  EXPECT_EQ(other_pod["usage"]["prompt_tokens_details"]["cached_tokens"], 0);  // per-pod cache
  const auto m = get(0, "/metrics").body;
  EXPECT_EQ(metric(m, "vllm:prefix_cache_hits_total"), 96);
  EXPECT_EQ(metric(m, "vllm:prefix_cache_queries_total"), 200);
}

TEST_F(ModelsimE2E, BadRequestsGetVllmErrors) {
  auto bad = fetch("127.0.0.1", port(0), "POST", "/v1/completions", "{not json");
  EXPECT_EQ(bad.status, 400);
  auto err = Json::parse(bad.body);
  ASSERT_TRUE(err.contains("error")) << bad.body;  // OpenAI's shape, which the SDKs parse
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(err["error"]["code"].is_null());
  auto missing = post(0, "/v1/completions", {{"prompt", "a"}, {"model", "nope"}});
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Json::parse(missing.body)["error"]["code"], "model_not_found") << missing.body;
  // Token-id prompts, lists of token-id lists and multi-prompt lists, as vLLM accepts them.
  for (const Json& prompt :
       {Json::array({1, 2, 3}), Json::array({Json::array({1, 2, 3})}),
        Json::array({Json::array({1, 2}), Json::array({3, 4})}), Json::array({"a b", "c d"})}) {
    auto r = post(0, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 2}});
    ASSERT_EQ(r.status, 200) << prompt << r.body;
    const std::size_t want = prompt[0].is_number() ? 1 : prompt.size();
    EXPECT_EQ(Json::parse(r.body)["choices"].size(), want) << prompt;
  }
  EXPECT_EQ(post(0, "/v1/completions", {{"prompt", "a"}, {"max_tokens", -1}}).status, 400);
  EXPECT_EQ(get(0, "/nowhere").status, 404);
  EXPECT_EQ(get(0, "/v1/completions").status, 405);
  auto big = post(0, "/v1/completions", {{"prompt", std::string(70000, 'x')}});
  EXPECT_EQ(big.status, 413);
  // A prompt longer than the model's context is refused like vLLM does.
  auto too_long =
      post(0, "/v1/completions", {{"prompt", words(1000, "d")}, {"max_tokens", 200000}});
  EXPECT_EQ(too_long.status, 400);
  EXPECT_NE(too_long.body.find("maximum context length"), std::string::npos);
}

TEST_F(ModelsimE2E, PodsHaveTheirProfiles) {
  EXPECT_EQ(state(0)["profile"], "h100");
  EXPECT_EQ(state(2)["profile"], "slow");
  EXPECT_NE(get(2, "/metrics").body.find("num_gpu_blocks=\"16000\""), std::string::npos);
  EXPECT_NE(get(0, "/metrics").body.find("num_gpu_blocks=\"32000\""), std::string::npos);
}

TEST_F(ModelsimE2E, LoadClientRunMovesTheMetrics) {
  workload::GenerateOptions gen;
  gen.seed = 11;
  gen.stages = {{60, 1.5}};
  gen.length_scale = 0.1;  // system 100, questions ~3, outputs ~100 tokens
  const auto trace = workload::generate(*workload::preset("C"), gen);
  ASSERT_GT(trace.requests.size(), 40u);

  loadclient::RunnerConfig streaming;
  streaming.url = "http://127.0.0.1:" + std::to_string(port(0));
  streaming.max_duration_s = 20;
  loadclient::RunnerConfig whole = streaming;
  whole.url = "http://127.0.0.1:" + std::to_string(port(1));
  whole.request.stream = false;
  whole.request.api = loadclient::Api::kChat;

  // Watch pod 0 while it is loaded: running requests and KV usage must show up.
  std::atomic<bool> done{false};
  auto watcher = std::async(std::launch::async, [&] {
    double max_running = 0, max_kv = 0;
    while (!done) {
      auto m = get(0, "/metrics", std::chrono::seconds(5)).body;
      max_running = std::max(max_running, metric(m, "vllm:num_requests_running"));
      max_kv = std::max(max_kv, metric(m, "vllm:kv_cache_usage_perc"));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::pair(max_running, max_kv);
  });
  auto other = std::async(std::launch::async, [&] { return loadclient::run_load(trace, whole); });
  const auto result = loadclient::run_load(trace, streaming);
  const auto result_chat = other.get();
  done = true;
  const auto [max_running, max_kv] = watcher.get();

  for (const auto* res : {&result, &result_chat}) {
    ASSERT_EQ(res->records.size(), trace.requests.size());
    for (const auto& r : res->records) {
      EXPECT_TRUE(r.ok) << r.index << ": " << r.error;
      EXPECT_EQ(r.completion_tokens, trace.requests[r.index].max_tokens);
      EXPECT_EQ(r.prompt_tokens, r.prompt_words);  // the pod counts words like the client
    }
  }
  int64_t cached = 0, later_turns = 0;
  for (const auto& r : result.records) {
    cached += std::max<int64_t>(0, r.cached_tokens);
    later_turns += r.turn > 0 ? 1 : 0;
    EXPECT_EQ(r.content_chunks, r.completion_tokens);
    EXPECT_GE(r.first_token_ms, r.sent_ms);
    EXPECT_LE(r.first_token_ms, r.end_ms);
  }
  EXPECT_GT(cached, 0);  // shared system prompts and re-sent conversations hit the cache
  EXPECT_GT(later_turns, 0);
  EXPECT_GE(max_running, 1);
  EXPECT_GT(max_kv, 0);

  const auto m = get(0, "/metrics").body;
  const auto n = static_cast<double>(trace.requests.size());
  EXPECT_EQ(metric(m, "vllm:time_to_first_token_seconds_count"), n);
  EXPECT_EQ(metric(m, "vllm:e2e_request_latency_seconds_count"), n);
  EXPECT_EQ(metric(m, "vllm:request_success_total"), n);
  EXPECT_EQ(metric(m, "vllm:prefix_cache_hits_total"), static_cast<double>(cached));
  EXPECT_EQ(metric(m, "vllm:num_requests_running"), 0);

  loadclient::SummaryInfo info;
  info.time_scale = 20;
  auto summary = loadclient::summarize(result.records, trace.stages, info);
  EXPECT_DOUBLE_EQ(summary["overall"]["success_rate"].get<double>(), 1.0);
  EXPECT_GT(summary["stages"][0]["output_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(summary["overall"]["prefix_cache_hit_ratio"].get<double>(), 0);
}

TEST_F(ModelsimE2E, ClientDisconnectAbortsTheEngineRequest) {
  auto r = post(0, "/v1/completions",
                {{"prompt", "a b c"}, {"max_tokens", 100000 - 10}, {"stream", true}},
                std::chrono::milliseconds(300));
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.error.empty());  // we hung up
  Json s;
  for (int i = 0; i < 100; ++i) {
    s = state(0);
    if (s["requests_aborted"] == 1) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(s["requests_aborted"], 1);
  EXPECT_EQ(s["num_running"], 0);
  EXPECT_EQ(s["live_requests"], 0);
}

TEST_F(ModelsimE2E, ErrorFaultAnswers500UntilCleared) {
  fault(1, {{"mode", "error"}});
  auto r = post(1, "/v1/completions", {{"prompt", "a b"}, {"max_tokens", 2}, {"stream", true}});
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(Json::parse(r.body)["error"]["type"], "server_error");
  EXPECT_EQ(get(1, "/health").status, 500);
  EXPECT_EQ(get(1, "/metrics").status, 200);
  EXPECT_EQ(post(0, "/v1/completions", {{"prompt", "a b"}, {"max_tokens", 2}}).status, 200);
  fault(1, {{"mode", "none"}});
  EXPECT_EQ(post(1, "/v1/completions", {{"prompt", "a b"}, {"max_tokens", 2}}).status, 200);
  // A fault with a duration ends by itself.
  fault(1, {{"mode", "error"}, {"duration_ms", 150}});
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    status = get(1, "/health").status;
  }
  EXPECT_EQ(status, 200);
  EXPECT_EQ(post(1, "/admin/fault", {{"mode", "bogus"}}).status, 400);
}

TEST_F(ModelsimE2E, CloseFaultDropsConnections) {
  fault(0, {{"mode", "close"}});
  auto r = post(0, "/v1/completions", {{"prompt", "a b"}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.error.empty());
  EXPECT_EQ(get(0, "/health").status, 200);  // only inference connections are dropped

  // Mid-stream: three chunks, then the connection goes without [DONE].
  fault(0, {{"mode", "close"}, {"after_tokens", 3}});
  auto cut = post(0, "/v1/completions", {{"prompt", "a b"}, {"max_tokens", 50}, {"stream", true}});
  EXPECT_EQ(cut.status, 200);
  EXPECT_FALSE(cut.error.empty());
  auto events = sse_events(cut.body);
  EXPECT_EQ(events.size(), 3u);
  EXPECT_TRUE(std::find(events.begin(), events.end(), "[DONE]") == events.end());

  // The load client records such requests as failed.
  workload::GenerateOptions gen;
  gen.stages = {{50, 0.2}};
  gen.length_scale = 0.02;
  const auto trace = workload::generate(*workload::preset("A"), gen);
  loadclient::RunnerConfig cfg;
  cfg.url = "http://127.0.0.1:" + std::to_string(port(0));
  cfg.max_duration_s = 10;
  auto result = loadclient::run_load(trace, cfg);
  ASSERT_FALSE(result.records.empty());
  for (const auto& rec : result.records) {
    EXPECT_FALSE(rec.ok);
  }
  fault(0, {{"mode", "none"}});
  EXPECT_EQ(post(0, "/v1/completions", {{"prompt", "a b"}, {"max_tokens", 2}}).status, 200);
}

TEST_F(ModelsimE2E, StallHoldsRequestsUntilItEnds) {
  fault(2, {{"mode", "stall"}});
  // Nothing is answered while stalled (bounded wait: this can only pass late, never early).
  auto health = get(2, "/health", std::chrono::milliseconds(300));
  EXPECT_EQ(health.status, 0);
  EXPECT_NE(health.error.find("timeout"), std::string::npos) << health.error;
  auto held = std::async(std::launch::async, [&] {
    return post(2, "/v1/completions", {{"prompt", "a b c"}, {"max_tokens", 3}});
  });
  EXPECT_EQ(held.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  EXPECT_EQ(get(1, "/health").status, 200);  // other pods are unaffected
  fault(2, {{"mode", "none"}});
  auto r = held.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(Json::parse(r.body)["usage"]["completion_tokens"], 3);
  EXPECT_EQ(get(2, "/health").status, 200);
}

TEST_F(ModelsimE2E, LoadClientIsBoundedByItsWallClockCap) {
  fault(0, {{"mode", "stall"}});
  workload::GenerateOptions gen;
  gen.stages = {{20, 5}};
  gen.length_scale = 0.02;
  const auto trace = workload::generate(*workload::preset("sharegpt"), gen);
  loadclient::RunnerConfig cfg;
  cfg.url = "http://127.0.0.1:" + std::to_string(port(0));
  cfg.max_duration_s = 0.5;
  cfg.max_requests = 1000;
  auto result = loadclient::run_load(trace, cfg);
  EXPECT_TRUE(result.stopped_by_wall_cap);
  EXPECT_GT(result.not_sent, 0);
  ASSERT_FALSE(result.records.empty());
  for (const auto& r : result.records) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error.rfind("aborted", 0), 0u) << r.error;
  }
  fault(0, {{"mode", "none"}});
  // The pod drops the abandoned requests once it runs again.
  Json s;
  for (int i = 0; i < 100; ++i) {
    s = state(0);
    if (s["live_requests"] == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(s["live_requests"], 0);
}

TEST(ModelsimE2EIdle, LoadClientReconnectsWhenTheServerClosedAnIdleConnection) {
  const uint16_t p = free_port();
  Process proc(binary("bench/modelsim/modelsim"),
               {"--pods", "1", "--base-port", std::to_string(p), "--time-scale", "20",
                "--idle-timeout-ms", "100", "--log-level", "warn"});
  ASSERT_TRUE(proc.wait_http_ok(p, "/health"));
  // Two requests of different sessions, 400 ms apart: the kept-alive connection of the first is
  // closed by the server before the second reuses it.
  workload::GenerateOptions gen;
  gen.stages = {{1, 1}};
  gen.length_scale = 0.01;
  auto trace = workload::generate(*workload::preset("sharegpt"), gen);
  trace.requests.resize(1);
  trace.requests[0].arrival_ms = 0;
  auto second = trace.requests[0];
  second.index = 1;
  second.session = 1;
  second.arrival_ms = 400;
  trace.requests.push_back(second);
  loadclient::RunnerConfig cfg;
  cfg.url = "http://127.0.0.1:" + std::to_string(p);
  cfg.max_duration_s = 10;
  cfg.max_in_flight = 1;
  auto result = loadclient::run_load(trace, cfg);
  ASSERT_EQ(result.records.size(), 2u);
  EXPECT_TRUE(result.records[0].ok) << result.records[0].error;
  EXPECT_TRUE(result.records[1].ok) << result.records[1].error;
  EXPECT_EQ(proc.terminate(), 0);
}

TEST(ModelsimE2EIdle, LoadClientBinaryComparesTwoRunsAndDrawsTheirLatencyOverTime) {
  const uint16_t p = free_port();
  Process pods(binary("bench/modelsim/modelsim"), {"--pods", "1", "--base-port", std::to_string(p),
                                                   "--time-scale", "20", "--log-level", "warn"});
  ASSERT_TRUE(pods.wait_http_ok(p, "/health"));
  TempDir dir;
  for (const std::string run : {"a", "b"}) {
    Process client(binary("bench/loadclient/loadclient"),
                   {"--url", "http://127.0.0.1:" + std::to_string(p), "--workload", "sharegpt",
                    "--stages", "20:2", "--length-scale", "0.01", "--time-scale", "20", "--out-dir",
                    dir.file(run), "--log-level", "warn"});
    ASSERT_EQ(client.wait_exit(std::chrono::seconds(60)), 0) << client.log();
  }
  Process compare(binary("bench/loadclient/loadclient"),
                  {"--compare", "first=" + dir.file("a") + ",second=" + dir.file("b"), "--chart",
                   dir.file("latency.svg")});
  ASSERT_EQ(compare.wait_exit(), 0) << compare.log();
  EXPECT_NE(compare.log().find("TTFT p95 vs 1st run"), std::string::npos) << compare.log();
  std::ifstream in(dir.file("latency.svg"));
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(svg.starts_with("<svg")) << svg.substr(0, 200);
  EXPECT_NE(svg.find(">second</text>"), std::string::npos) << "both runs in the legend";
  EXPECT_NE(svg.find("workload sharegpt, seed 1, stages 20:2"), std::string::npos);
  // --chart alone would be silently ignored: it is refused instead.
  Process alone(binary("bench/loadclient/loadclient"), {"--chart", dir.file("x.svg")});
  EXPECT_NE(alone.wait_exit(), 0);
  EXPECT_NE(alone.log().find("--compare"), std::string::npos) << alone.log();
  EXPECT_EQ(pods.terminate(), 0);
}

}  // namespace
}  // namespace llmd::testing
