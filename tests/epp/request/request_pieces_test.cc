// The EPP's transport-free pieces: OpenAI request parsing, SSE scanning, vLLM metric parsing,
// training samples from completed requests, pod bookkeeping.
#include <gtest/gtest.h>

#include "epp/datastore/metrics_parser.h"
#include "epp/datastore/pod_registry.h"
#include "epp/features/feature_row.h"
#include "epp/feedback/training_feedback.h"
#include "epp/request/openai_request.h"
#include "epp/request/sse_scanner.h"
#include "tests/epp/datastore/vllm_exposition.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

using Json = nlohmann::json;

// The EPP's error objects: OpenAI's shape, `param` the offending field of a 400, `code` a
// string or null (the SDKs type it as a string).
TEST(OpenAiError, ParamNamesTheFieldAndCodeIsAStringOrNull) {
  ParsedRequest p;
  auto error_of = [&](std::string_view path, std::string_view body) {
    auto message = parse_openai_request(path, body, InboundHeaders{}, RequestDefaults{}, p);
    EXPECT_TRUE(message.has_value()) << body;
    return nlohmann::json::parse(openai_error_body(400, message.value_or("")))["error"];
  };
  auto e = error_of("/v1/completions", R"({"model":"m","prompt":"x","max_tokens":-1})");
  EXPECT_EQ(e["param"], "max_tokens");
  EXPECT_EQ(e["code"], "invalid_value");
  EXPECT_EQ(e["type"], "invalid_request_error");
  e = error_of("/v1/completions", R"({"prompt":"x"})");
  EXPECT_EQ(e["param"], "model");
  EXPECT_EQ(e["code"], "missing_required_parameter");
  e = error_of("/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":1}]})");
  EXPECT_EQ(e["param"], "messages[0].content");
  // Present with the wrong type is not missing (OpenAI: invalid_type); a message needs its role.
  e = error_of("/v1/chat/completions", R"({"model":"m","messages":"hello"})");
  EXPECT_EQ(e["param"], "messages");
  EXPECT_EQ(e["code"], "invalid_type");
  EXPECT_NE(e["message"].get<std::string>().find("got a string"), std::string::npos);
  e = error_of("/v1/chat/completions", R"({"model":"m"})");
  EXPECT_EQ(e["code"], "missing_required_parameter");
  e = error_of("/v1/chat/completions", R"({"model":"m","messages":[]})");
  EXPECT_EQ(e["param"], "messages");
  EXPECT_EQ(e["code"], "invalid_value");
  e = error_of("/v1/chat/completions", R"({"model":"m","messages":[{"content":"hi"}]})");
  EXPECT_EQ(e["param"], "messages[0].role");
  EXPECT_EQ(e["code"], "missing_required_parameter");
  e = error_of("/v1/chat/completions", R"({"model":"m","messages":[{"role":3,"content":"hi"}]})");
  EXPECT_EQ(e["param"], "messages[0].role");
  EXPECT_EQ(e["code"], "invalid_type");
  e = error_of("/v1/completions", "{oops");
  EXPECT_TRUE(e["param"].is_null());
  EXPECT_TRUE(e["code"].is_null());
  EXPECT_EQ(error_param("header x-metadata must be a JSON object"), std::nullopt);
  for (int status : {404, 405, 413, 502, 503, 504}) {
    const auto other =
        nlohmann::json::parse(openai_error_body(status, "field 'x' is odd"))["error"];
    EXPECT_TRUE(other["param"].is_null()) << status;
    EXPECT_TRUE(other["code"].is_null()) << status;
  }
  EXPECT_EQ(nlohmann::json::parse(openai_error_body(429, "shed"))["error"]["code"],
            "rate_limit_exceeded");
  const auto named = nlohmann::json::parse(
      openai_error_body(404, "no such model", std::nullopt, "model_not_found"))["error"];
  EXPECT_EQ(named["code"], "model_not_found");
  EXPECT_TRUE(named["param"].is_null());
}

TEST(OpenAiRequest, CompletionAndChatPromptsHeadersAndHints) {
  InboundHeaders h;
  h.request_id = "r1";
  h.slo_ttft_ms = "250";
  h.prediction_based_scheduling = "false";
  ParsedRequest p;
  ASSERT_FALSE(
      parse_openai_request("/v1/completions",
                           R"({"model":"m","prompt":"one two  three","stream":true,"max_tokens":7,
          "nvext":{"agent_hints":{"priority":-2,"strict_priority":3}}})",
                           h, RequestDefaults{}, p));
  EXPECT_EQ(p.request.input_tokens, 3);
  EXPECT_TRUE(p.request.streaming);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.request.priority, -2);
  EXPECT_TRUE(p.request.sheddable());
  EXPECT_EQ(p.request.strict_priority, 3);
  EXPECT_EQ(*p.request.slo_ttft_ms, 250.0);
  EXPECT_FALSE(p.request.prediction_enabled);
  ParsedRequest c;
  ASSERT_FALSE(
      parse_openai_request("/v1/chat/completions",
                           R"({"model":"m","messages":[{"role":"system","content":"be brief"},
          {"role":"user","content":[{"type":"text","text":"hi there"}]}]})",
                           InboundHeaders{}, RequestDefaults{}, c));
  EXPECT_EQ(c.request.prompt_text, "be brief hi there ");
  EXPECT_EQ(c.request.input_tokens, 4);
  EXPECT_TRUE(c.request.prediction_enabled);
}

TEST(OpenAiRequest, TheDebugHeaderAsksOnlyWhenTheEppAllowsIt) {
  auto explain = [](std::optional<std::string> debug, bool allowed) {
    InboundHeaders h = read_inbound_headers(
        [&debug](std::string_view name) { return name == "x-llmd-debug" ? debug : std::nullopt; });
    RequestDefaults d;
    d.allow_debug_header = allowed;
    ParsedRequest p;
    EXPECT_FALSE(parse_openai_request("/v1/completions", R"({"model":"m","prompt":"x"})", h, d, p));
    return p.request.explain;
  };
  EXPECT_TRUE(explain("1", true));
  EXPECT_TRUE(explain("true", true));
  EXPECT_TRUE(explain("", true));  // present, any value but an explicit no
  EXPECT_FALSE(explain("0", true));
  EXPECT_FALSE(explain("False", true));
  EXPECT_FALSE(explain(std::nullopt, true));
  EXPECT_FALSE(explain("1", false)) << "without --allow-debug-header the header is ignored";
}

TEST(OpenAiRequest, BadInputGivesAMessage) {
  ParsedRequest p;
  EXPECT_TRUE(parse_openai_request("/v1/completions", "{", InboundHeaders{}, RequestDefaults{}, p));
  EXPECT_TRUE(parse_openai_request("/v1/completions", R"({"prompt":"x"})", InboundHeaders{},
                                   RequestDefaults{}, p));
  EXPECT_TRUE(parse_openai_request("/v1/chat/completions", R"({"model":"m"})", InboundHeaders{},
                                   RequestDefaults{}, p));
  InboundHeaders bad;
  bad.slo_ttft_ms = "fast";
  auto e = parse_openai_request("/v1/completions", R"({"model":"m","prompt":"x"})", bad,
                                RequestDefaults{}, p);
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("header x-llm-d-slo-ttft-ms "), std::string::npos) << *e;
  bad.slo_ttft_header = "x-slo-ttft-ms";  // the name the client sent
  e = parse_openai_request("/v1/completions", R"({"model":"m","prompt":"x"})", bad,
                           RequestDefaults{}, p);
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("header x-slo-ttft-ms "), std::string::npos) << *e;
}

// Every field the EPP reads: a wrong type is a 400 naming the field (it used to throw and drop
// the connection), out-of-range priorities are refused instead of wrapping.
TEST(OpenAiRequest, WrongTypesAndRangesNameTheField) {
  auto error = [](std::string_view path, std::string_view body, InboundHeaders h = {}) {
    ParsedRequest p;
    return parse_openai_request(path, body, h, RequestDefaults{}, p).value_or("");
  };
  const std::string c = "/v1/completions", chat = "/v1/chat/completions";
  // What vLLM (pydantic's lax booleans) refuses too.
  for (const char* stream : {R"("maybe")", "2", "0.5", R"(" true")", "[]", "{}"}) {
    EXPECT_NE(error(c, std::string(R"({"model":"m","prompt":"x","stream":)") + stream + "}")
                  .find("'stream'"),
              std::string::npos)
        << stream;
  }
  EXPECT_NE(error(c, R"({"model":"m","prompt":"x","stream":true,"stream_options":1})")
                .find("'stream_options'"),
            std::string::npos);
  EXPECT_NE(error(c, R"({"model":"m","prompt":"x","stream_options":{"include_usage":"maybe"}})")
                .find("include_usage"),
            std::string::npos);
  EXPECT_NE(error(c, R"({"model":"m","prompt":"x","max_tokens":"9"})").find("'max_tokens'"),
            std::string::npos);
  EXPECT_NE(error(c, R"({"model":"m","prompt":"x","max_tokens":-1})").find("'max_tokens'"),
            std::string::npos);
  EXPECT_NE(error(chat, R"({"model":"m","messages":[{"role":"user","content":[{"type":5}]}]})")
                .find("messages[0].content[0].type"),
            std::string::npos);
  EXPECT_NE(error(chat, R"({"model":"m","messages":["hi"]})").find("messages[0]"),
            std::string::npos);
  EXPECT_NE(error(chat, R"({"model":"m","messages":[{"role":"user","content":7}]})")
                .find("messages[0].content"),
            std::string::npos);
  EXPECT_NE(
      error(
          c,
          R"({"model":"m","prompt":"x","nvext":{"agent_hints":{"priority":18446744073709551615}}})")
          .find("priority"),
      std::string::npos);
  EXPECT_NE(
      error(
          c,
          R"({"model":"m","prompt":"x","nvext":{"agent_hints":{"priority":-9223372036854775808}}})")
          .find("priority"),
      std::string::npos);
  InboundHeaders h;
  h.priority = "-9223372036854775808";
  EXPECT_NE(error(c, R"({"model":"m","prompt":"x"})", h).find("x-dynamo-request-priority"),
            std::string::npos);
  // Nulls are absent fields; valid shapes still parse.
  EXPECT_EQ(error(c, R"({"model":"m","prompt":"x","stream":null,"max_tokens":null})"), "");
  EXPECT_EQ(
      error(
          chat,
          R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}},{"type":"text","text":"hi"}]}]})"),
      "");
}

// The Inference Extension's latency guide sends "stream": "true"; vLLM serves it (pydantic's
// lax booleans), so the EPP schedules it as a stream and forwards the body unchanged.
TEST(OpenAiRequest, BooleansAreReadAsVllmReadsThem) {
  auto streaming = [](const std::string& value) {
    ParsedRequest p;
    const std::string body = R"({"model":"m","prompt":"x","stream":)" + value +
                             R"(,"stream_options":{"include_usage":)" + value + "}}";
    auto e = parse_openai_request("/v1/completions", body, InboundHeaders{}, RequestDefaults{}, p);
    EXPECT_FALSE(e) << value << ": " << e.value_or("");
    EXPECT_FALSE(upstream_body(p, nullptr, true)) << "forwarded as the client wrote it";
    return p.request.streaming;
  };
  for (const char* yes : {"true", "1", "1.0", R"("true")", R"("True")", R"("1")", R"("yes")",
                          R"("on")", R"("t")", R"("Y")"}) {
    EXPECT_TRUE(streaming(yes)) << yes;
  }
  for (const char* no : {"false", "0", "0.0", R"("false")", R"("FALSE")", R"("0")", R"("no")",
                         R"("off")", R"("f")", R"("n")"}) {
    EXPECT_FALSE(streaming(no)) << no;
  }
  // A body the proxy rewrites anyway keeps the client's spelling, which the pod reads alike.
  ParsedRequest p;
  ASSERT_FALSE(parse_openai_request("/v1/completions",
                                    R"({"model":"m","prompt":"x","stream":"true"})",
                                    InboundHeaders{}, RequestDefaults{}, p));
  const auto rewritten = upstream_body(p, Json{{"model", "other"}}, true);
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(Json::parse(*rewritten)["stream"], "true");
  // Anything else is OpenAI's invalid_request_error naming the field.
  auto e = parse_openai_request("/v1/completions", R"({"model":"m","prompt":"x","stream":"maybe"})",
                                InboundHeaders{}, RequestDefaults{}, p);
  ASSERT_TRUE(e);
  const auto error = Json::parse(openai_error_body(400, *e))["error"];
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_EQ(error["param"], "stream");
  EXPECT_EQ(error["code"], "invalid_value");
  EXPECT_NE(error["message"].get<std::string>().find("\"maybe\""), std::string::npos) << error;
}

TEST(OpenAiRequest, TokenIdPromptsAndPromptLists) {
  auto parse = [](std::string_view body, ParsedRequest& p) {
    return parse_openai_request("/v1/completions", body, InboundHeaders{}, RequestDefaults{}, p);
  };
  ParsedRequest ids;
  ASSERT_FALSE(parse(R"({"model":"m","prompt":[101,2023,2003]})", ids));
  EXPECT_EQ(ids.request.prompt_text, "101 2023 2003 ");
  EXPECT_EQ(ids.request.input_tokens, 3);
  ParsedRequest lists;
  ASSERT_FALSE(parse(R"({"model":"m","prompt":[[1,2],[3]]})", lists));
  EXPECT_EQ(lists.request.input_tokens, 3);
  ParsedRequest strings;
  ASSERT_FALSE(parse(R"({"model":"m","prompt":["a b","c"]})", strings));
  EXPECT_EQ(strings.request.input_tokens, 3);
  for (const char* bad : {R"([1,"x"])", R"([-1])", R"([1.5])", "[]", R"([[]])", R"([{}])", "7"}) {
    ParsedRequest p;
    auto e = parse(std::string(R"({"model":"m","prompt":)") + bad + "}", p);
    ASSERT_TRUE(e) << bad;
    EXPECT_NE(e->find("'prompt'"), std::string::npos) << *e;
  }
}

TEST(SseScanner, FirstContentAndUsageAcrossArbitrarySplits) {
  const std::string stream =
      "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\" hi\"}}]}\r\n\r\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9,"
      "\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n"
      "data: [DONE]\n\n";
  for (std::size_t split = 1; split < stream.size(); split += 7) {
    SseScanner s;
    int firsts = 0;
    for (std::size_t i = 0; i < stream.size(); i += split) {
      firsts += s.feed(std::string_view(stream).substr(i, split)) ? 1 : 0;
    }
    EXPECT_EQ(firsts, 1) << split;
    EXPECT_TRUE(s.saw_done());
    EXPECT_EQ(*s.completion_tokens(), 9);
    EXPECT_EQ(*s.cached_tokens(), 4);
  }
  EXPECT_EQ(*parse_usage(R"({"usage":{"completion_tokens":3}})").completion_tokens, 3);
}

TEST(ResponseFacts, CarryTheUsagesPromptTokens) {
  ParsedRequest streamed;
  ASSERT_FALSE(parse_openai_request(
      "/v1/completions", R"({"model":"m","prompt":"Once","stream":true})", {}, {}, streamed));
  SseScanner s;
  s.feed(
      "data: {\"choices\":[{\"text\":\" upon\"}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n");
  EXPECT_EQ(response_facts(streamed, s, "").prompt_tokens, 5);
  ParsedRequest whole;
  ASSERT_FALSE(
      parse_openai_request("/v1/completions", R"({"model":"m","prompt":"Once"})", {}, {}, whole));
  EXPECT_EQ(response_facts(whole, SseScanner{},
                           R"({"choices":[{"text":" upon"}],"usage":{"prompt_tokens":7}})")
                .prompt_tokens,
            7);
  EXPECT_FALSE(
      response_facts(whole, SseScanner{}, R"({"choices":[{"text":" upon"}]})").prompt_tokens);
}

// Megabytes of blank lines are read in one pass (the scanner searches only new bytes), and the
// event after them still counts.
TEST(SseScanner, ManyLinesInOneFeedAndAnEventAfterThem) {
  SseScanner s;
  EXPECT_FALSE(s.feed(std::string(4 * 1024 * 1024, '\n')));
  EXPECT_TRUE(s.feed("data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n"));
  EXPECT_EQ(s.content_chunks(), 1);
  EXPECT_FALSE(s.overlong());
}

// A line longer than the bound, however it is split, is the pod's protocol error: the scanner
// stops and ignores what follows.
TEST(SseScanner, ALineBeyondTheBoundIsOverlongAndStopsTheScanner) {
  SseScanner s;
  const std::string piece(64 * 1024, 'x');
  EXPECT_FALSE(s.feed("data: "));
  for (std::size_t sent = 0; sent < SseScanner::kMaxLineBytes; sent += piece.size()) {
    ASSERT_FALSE(s.overlong()) << sent;  // 6 + 1 MiB after the last piece: one line too long
    s.feed(piece);
  }
  EXPECT_TRUE(s.overlong());
  EXPECT_FALSE(s.feed("\n\ndata: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n"));
  EXPECT_EQ(s.content_chunks(), 0);
  // A line of exactly the bound is still read.
  SseScanner t;
  t.feed("data: " + std::string(SseScanner::kMaxLineBytes - 6, ' '));
  EXPECT_FALSE(t.overlong());
}

TEST(SseScanner, CountsContentChunksAndKeepsTheAnswerWithoutUsage) {
  const std::string stream =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"The\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" answer\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":\"x\",\"text\":\" ignored\"}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"text\":\".\"}]}\n\n"
      "data: [DONE]\n\n";
  SseScanner s;
  s.feed(stream);
  EXPECT_FALSE(s.completion_tokens());
  EXPECT_EQ(s.content_chunks(), 4);  // a chunk of another (or a malformed) choice still counts
  EXPECT_EQ(s.generated_text(), "The answer.");
  Usage u = parse_usage(R"({"choices":[{"message":{"role":"assistant","content":"Hi there"}}]})");
  EXPECT_EQ(u.generated_text, "Hi there");
  EXPECT_FALSE(u.completion_tokens);
}

TEST(ContinuationPrompt, ChatAndCompletionsInTheNextTurnsForm) {
  ParsedRequest chat;
  ASSERT_FALSE(parse_openai_request(
      "/v1/chat/completions",
      R"({"model":"m","messages":[{"role":"user","content":"What is KV?"}]})", {}, {}, chat));
  const std::string continued = continuation_prompt(chat, "A cache.");
  ParsedRequest next;
  ASSERT_FALSE(parse_openai_request(
      "/v1/chat/completions",
      R"({"model":"m","messages":[{"role":"user","content":"What is KV?"},)"
      R"({"role":"assistant","content":"A cache."},{"role":"user","content":"Why?"}]})",
      {}, {}, next));
  EXPECT_TRUE(next.request.prompt_text.starts_with(continued));
  ParsedRequest completion;
  ASSERT_FALSE(parse_openai_request("/v1/completions", R"({"model":"m","prompt":"Once"})", {}, {},
                                    completion));
  EXPECT_EQ(continuation_prompt(completion, " upon"), "Once upon");
  EXPECT_EQ(continuation_prompt(completion, ""), "");
  ParsedRequest list;
  ASSERT_FALSE(
      parse_openai_request("/v1/completions", R"({"model":"m","prompt":["a","b"]})", {}, {}, list));
  EXPECT_EQ(continuation_prompt(list, "x"), "");  // several prompts: no single next turn
}

TEST(VllmMetrics, ServedModelNamesFromTheRunningGauge) {
  auto m = parse_vllm_metrics(
      "vllm:num_requests_waiting{model_name=\"a\"} 0\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"} 1\n"
      "vllm:num_requests_running{engine=\"1\",model_name=\"odd \\\"name\\\\\"} 1\n"
      "vllm:num_requests_running{engine=\"2\",model_name=\"meta-llama/Llama-3.1-8B\"} 1\n"
      "vllm:kv_cache_usage_perc 0.1\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->models, (std::vector<std::string>{"meta-llama/Llama-3.1-8B", "odd \"name\\"}));
}

TEST(VllmMetrics, BothKvNamesAndCacheConfig) {
  auto m = parse_vllm_metrics(
      "# HELP x\nvllm:num_requests_waiting{model_name=\"m\"} 3\n"
      "vllm:num_requests_running{model_name=\"m\"} 7.0\n"
      "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n"
      "vllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\"1000\"} 1\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->waiting, 3);
  EXPECT_EQ(m->running, 7);
  EXPECT_DOUBLE_EQ(m->kv_cache_usage, 0.25);
  EXPECT_EQ(m->block_size, 32);
  EXPECT_EQ(m->num_gpu_blocks, 1000);
  auto both = parse_vllm_metrics(
      "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\n"
      "vllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.5\n");
  EXPECT_DOUBLE_EQ(both->kv_cache_usage, 0.5);  // the new name wins
  EXPECT_FALSE(parse_vllm_metrics("vllm:num_requests_waiting 0\n"));
}

// A real pod's answer (402 lines): the five lines the EPP reads among the histograms, the
// Python metrics and the comments.
TEST(VllmMetrics, ARealPodsAnswer) {
  auto m = parse_vllm_metrics(testing::vllm_exposition(4, 9, 0.625));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->waiting, 4);
  EXPECT_EQ(m->running, 9);
  EXPECT_DOUBLE_EQ(m->kv_cache_usage, 0.625);
  EXPECT_EQ(m->block_size, 16);
  EXPECT_EQ(m->num_gpu_blocks, 29127);
  EXPECT_EQ(m->models, (std::vector<std::string>{"meta-llama/Llama-3.1-8B-Instruct"}));
}

TEST(VllmMetrics, OddValuesAndLineEndings) {
  auto m = parse_vllm_metrics(
      "vllm:num_requests_waiting{model_name=\"m\"} 1e1\r\n"
      "vllm:num_requests_running{model_name=\"m\"} +3\r\n"
      "vllm:kv_cache_usage_perc{model_name=\"m\"} 2.5e-1\r\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->waiting, 10);
  EXPECT_EQ(m->running, 3);
  EXPECT_DOUBLE_EQ(m->kv_cache_usage, 0.25);
  EXPECT_FALSE(
      parse_vllm_metrics("vllm:num_requests_waiting x\nvllm:num_requests_running 1\n"
                         "vllm:kv_cache_usage_perc 0\n"))
      << "an unreadable value is a missing gauge";
  EXPECT_FALSE(
      parse_vllm_metrics("vllm:num_requests_waiting_total 1\n"
                         "vllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0\n"))
      << "a longer name is another metric";
  EXPECT_FALSE(parse_vllm_metrics(""));
}

CompletedRequest sample_request() {
  CompletedRequest d;
  d.success = true;
  d.request.streaming = true;
  d.request.input_tokens = 100;
  d.first_token = true;
  d.ttft_ms = 50;
  d.e2e_ms = 140;
  d.completion_tokens = 10;
  d.pod = testing::with_info(d.pod, [](PodInfo& i) {
    i.metrics.kv_cache_usage = 0.4;
    i.metrics.waiting = 2;
  });
  d.pod.prefill_tokens_in_flight = 300;
  d.pod.prefix = PrefixCacheMatchInfo{3, 4};
  d.pod.latency = LatencyPredictionInfo{45, 9, 0, 0, true, true};
  d.pod.latency->expected_ttft_ms = 38;
  d.pod.latency->unphased_ttft_ms = 45;  // no step phase
  d.pod.latency->unphased_expected_ttft_ms = 38;
  d.pod.latency->expected_tpot_ms = 8;
  return d;
}

TEST(TrainingEntries, StreamingSendsTtftAtFirstTokenAndTpotAtCompletion) {
  CompletedRequest d = sample_request();
  auto ttft = first_token_entry(d, true);
  ASSERT_TRUE(ttft);
  EXPECT_DOUBLE_EQ((*ttft)["actual_ttft_ms"].get<double>(), 50);
  EXPECT_DOUBLE_EQ((*ttft)["actual_tpot_ms"].get<double>(), 0);
  EXPECT_DOUBLE_EQ((*ttft)["prefix_cache_score"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ((*ttft)["predicted_ttft_ms"].get<double>(), 45);
  EXPECT_DOUBLE_EQ((*ttft)["expected_ttft_ms"].get<double>(), 38);
  EXPECT_EQ((*ttft)["prefill_tokens_in_flight"], 300);
  EXPECT_EQ((*ttft)["num_tokens_generated"], 1);
  auto done = completion_entries(d, true);
  ASSERT_EQ(done.size(), 1u);  // the TTFT sample already left at the first token
  EXPECT_DOUBLE_EQ(done[0]["actual_tpot_ms"].get<double>(), 10);  // (140-50)/(10-1)
  EXPECT_DOUBLE_EQ(done[0]["actual_ttft_ms"].get<double>(), 0);
  EXPECT_EQ(done[0]["num_tokens_generated"], 10);
  EXPECT_DOUBLE_EQ(done[0]["predicted_tpot_ms"].get<double>(), 9);
  EXPECT_DOUBLE_EQ(done[0]["expected_tpot_ms"].get<double>(), 8);
  // The same row as the prediction: everything but the generated tokens agrees.
  for (const char* key : {"kv_cache_percentage", "input_token_length", "num_request_waiting",
                          "prefix_cache_score", "prefill_tokens_in_flight"}) {
    EXPECT_EQ((*ttft)[key], done[0][key]) << key;
  }
}

TEST(TrainingEntries, TheStepPhaseAddedToThePredictionComesOffTheTtftSample) {
  // Predicted at a pod whose step had just begun: +4 ms on the model's 41 / 34 ms.
  CompletedRequest d = sample_request();
  d.pod.latency->ttft_phase_ms = 4;
  d.pod.latency->unphased_ttft_ms = 41;
  d.pod.latency->unphased_expected_ttft_ms = 34;
  auto ttft = first_token_entry(d, true);
  ASSERT_TRUE(ttft);
  EXPECT_DOUBLE_EQ((*ttft)["actual_ttft_ms"].get<double>(), 46);
  EXPECT_DOUBLE_EQ((*ttft)["predicted_ttft_ms"].get<double>(), 41);
  EXPECT_DOUBLE_EQ((*ttft)["expected_ttft_ms"].get<double>(), 34);
  // And one whose step was about to end: -4 ms on the model's 49 / 42 ms; the sample is what an
  // average arrival would get.
  d.pod.latency->ttft_phase_ms = -4;
  d.pod.latency->unphased_ttft_ms = 49;
  d.pod.latency->unphased_expected_ttft_ms = 42;
  ttft = first_token_entry(d, true);
  EXPECT_DOUBLE_EQ((*ttft)["actual_ttft_ms"].get<double>(), 54);
  EXPECT_DOUBLE_EQ((*ttft)["expected_ttft_ms"].get<double>(), 42);
}

TEST(TrainingEntries, NonStreamingGivesNoTtftSampleInStreamingMode) {
  CompletedRequest d = sample_request();
  d.request.streaming = false;
  d.first_token = false;
  EXPECT_FALSE(first_token_entry(d, true));
  EXPECT_TRUE(completion_entries(d, true).empty());  // e2e time is not a TTFT
}

TEST(TrainingEntries, E2eModeSendsEndToEndAsTtftForEveryRequest) {
  CompletedRequest d = sample_request();
  EXPECT_FALSE(first_token_entry(d, false));
  for (bool streaming : {true, false}) {
    d.request.streaming = streaming;
    auto e = completion_entries(d, false);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_DOUBLE_EQ(e[0]["actual_ttft_ms"].get<double>(), 140);
    EXPECT_DOUBLE_EQ(e[0]["actual_tpot_ms"].get<double>(), 0);
  }
}

TEST(TrainingEntries, FailuresAbortsAndUpstreamUrlsAreNotSamples) {
  CompletedRequest d = sample_request();
  d.success = false;
  EXPECT_TRUE(completion_entries(d, true).empty());
  d = sample_request();
  d.client_aborted = true;
  EXPECT_TRUE(completion_entries(d, true).empty());
  d = sample_request();
  d.upstream_url = true;
  EXPECT_FALSE(first_token_entry(d, true));
  EXPECT_TRUE(completion_entries(d, true).empty());
  d = sample_request();
  d.completion_tokens = 1;  // one token has no inter-token time
  EXPECT_TRUE(completion_entries(d, true).empty());
}

TEST(FeatureRow, ClampsAndCountsUncachedTokens) {
  SchedulingRequest r;
  r.input_tokens = 1000;
  Endpoint e;
  e = testing::with_info(e, [](PodInfo& i) {
    i.metrics.kv_cache_usage = 1.3;
    i.metrics.waiting = -1;
  });
  e.prefix = PrefixCacheMatchInfo{3, 4};
  auto row = feature_row(r, e);
  EXPECT_DOUBLE_EQ(row.kv_cache_percentage, 1.0);
  EXPECT_EQ(row.num_request_waiting, 0);
  EXPECT_DOUBLE_EQ(row.prefix_cache_score, 0.75);
  EXPECT_EQ(uncached_prompt_tokens(r, e), 250);
  e.prefix.reset();
  EXPECT_EQ(uncached_prompt_tokens(r, e), 1000);
}

TEST(PodRegistry, StalenessCooldownAndExactInFlight) {
  PodRegistry r(std::chrono::milliseconds(1000));
  r.set_pods({{"a", "127.0.0.1:1", {}}, {"b", "127.0.0.1:2", {{"role", "decode"}}}});
  auto now = std::chrono::steady_clock::now();
  EXPECT_TRUE(r.candidates(now).empty());  // never scraped
  PodMetrics m;
  m.scraped_at = now;
  r.update_metrics("a", m);
  r.update_metrics("b", m);
  EXPECT_EQ(r.candidates(now).size(), 2u);
  // Both stale: below the panic threshold every pod that answered a scrape is a candidate.
  EXPECT_EQ(r.candidates(now + std::chrono::seconds(2)).size(), 2u);
  OutlierDetectionOptions no_panic;
  no_panic.panic_threshold_percent = 0;
  r.configure_outlier_detection(no_panic);
  EXPECT_TRUE(r.candidates(now + std::chrono::seconds(2)).empty());  // stale
  PodLive& a = *r.live("a");
  a.on_dispatch(100);
  a.on_dispatch(50);
  auto c = r.candidates(now);
  EXPECT_EQ(c[0].dispatched, 2);
  EXPECT_EQ(c[0].prefill_tokens_in_flight, 150);
  a.on_first_token(100, 20);
  a.on_finished(100, 20, true);
  a.on_finished(50, 20, false);
  c = r.candidates(now);
  EXPECT_EQ(c[0].dispatched, 0);
  EXPECT_EQ(c[0].prefill_tokens_in_flight, 0);
  EXPECT_EQ(c[0].decode_tokens_in_flight, 0);
  for (int i = 0; i < no_panic.consecutive_failures; ++i) {
    r.on_pod_failure("b", now);
  }
  EXPECT_EQ(r.candidates(now).size(), 1u);
}

}  // namespace
}  // namespace llmd::epp
