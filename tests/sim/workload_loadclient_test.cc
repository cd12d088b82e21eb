// Workload generator (bench/workload) and the transport-free parts of the load client
// (bench/loadclient): SSE framing, request bodies of multi-turn conversations, response
// accumulation and the run summary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>

#include "bench/loadclient/latency_chart.h"
#include "bench/loadclient/openai.h"
#include "bench/loadclient/report.h"
#include "bench/loadclient/sse.h"
#include "bench/workload/workload.h"

namespace llmd {
namespace {

using Json = nlohmann::json;
using workload::GenerateOptions;
using workload::Stage;

int64_t word_count(const std::string& s) {
  int64_t n = 0;
  bool in = false;
  for (char c : s) {
    if (c == ' ') {
      in = false;
    } else if (!in) {
      in = true;
      ++n;
    }
  }
  return n;
}

workload::Trace make(const std::string& preset, uint64_t seed, std::vector<Stage> stages,
                     double length_scale = 1.0) {
  GenerateOptions o;
  o.seed = seed;
  o.stages = std::move(stages);
  o.length_scale = length_scale;
  return workload::generate(*workload::preset(preset), o);
}

TEST(SimWorkload, SameSeedSameTraceAndOtherSeedsDiffer) {
  auto a = make("A", 7, {{10, 20}});
  auto b = make("A", 7, {{10, 20}});
  auto c = make("A", 8, {{10, 20}});
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (std::size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].arrival_ms, b.requests[i].arrival_ms);
    EXPECT_EQ(a.requests[i].session, b.requests[i].session);
    EXPECT_EQ(a.question(a.requests[i]), b.question(b.requests[i]));
    EXPECT_EQ(a.requests[i].max_tokens, b.requests[i].max_tokens);
  }
  EXPECT_EQ(a.system_prompt(3), b.system_prompt(3));
  EXPECT_NE(a.system_prompt(3), a.system_prompt(4));
  EXPECT_NE(a.requests[0].arrival_ms, c.requests[0].arrival_ms);
}

TEST(SimWorkload, PresetsMatchTheContractTable) {
  for (const auto& name : workload::preset_names()) {
    EXPECT_TRUE(workload::preset(name).has_value()) << name;
  }
  EXPECT_FALSE(workload::preset("E").has_value());
  auto a = *workload::preset("A");
  EXPECT_EQ(a.num_groups * a.prompts_per_group, 6000);
  EXPECT_EQ(a.system_prompt_len, 1000);
  auto c = *workload::preset("C");
  EXPECT_EQ(c.num_groups, 150);
  EXPECT_EQ(c.prompts_per_group, 5);
  EXPECT_EQ(c.system_prompt_len, 6000);
  EXPECT_DOUBLE_EQ(c.question_len.mean, 1200);
  EXPECT_DOUBLE_EQ(c.question_len.std, 360);
  auto d = *workload::preset("D");
  EXPECT_DOUBLE_EQ(d.question_len.mean, 6200);
  EXPECT_DOUBLE_EQ(d.question_len.std, 1860);
  auto p = *workload::preset("production");
  EXPECT_EQ(p.default_stages.size(), 8u);
  EXPECT_EQ(p.question_len.max, 131072);
  EXPECT_EQ(p.output_len.max, 8192);
  EXPECT_FALSE(workload::preset("sharegpt")->shared_prefix);
}

TEST(SimWorkload, LengthsFollowTheirDistributions) {
  auto t = make("B", 1, {{200, 30}});
  ASSERT_GT(t.requests.size(), 5000u);
  double q = 0, o = 0;
  for (const auto& r : t.requests) {
    q += static_cast<double>(r.question_len);
    o += static_cast<double>(r.max_tokens);
  }
  const auto n = static_cast<double>(t.requests.size());
  EXPECT_NEAR(q / n, 3000, 60);
  EXPECT_NEAR(o / n, 1000, 20);
  EXPECT_EQ(word_count(t.question(t.requests[0])), t.requests[0].question_len);
  EXPECT_EQ(word_count(t.system_prompt(0)), 1000);

  auto s = make("sharegpt", 1, {{200, 30}});
  std::vector<int64_t> in;
  for (const auto& r : s.requests) {
    in.push_back(r.question_len);
  }
  std::sort(in.begin(), in.end());
  EXPECT_NEAR(static_cast<double>(in[in.size() / 2]), 100, 15);
  EXPECT_GT(in.back(), 1000);  // heavy tail

  auto small = make("B", 1, {{50, 10}}, 0.1);
  EXPECT_EQ(small.spec.system_prompt_len, 100);
  EXPECT_NEAR(small.spec.question_len.mean, 300, 1e-9);
}

TEST(SimWorkload, PoissonStagesHaveTheirRates) {
  auto t = make("A", 3, {{5, 100}, {50, 20}});
  std::map<int, int> per_stage;
  double last = 0;
  for (const auto& r : t.requests) {
    ++per_stage[r.stage];
    EXPECT_GE(r.arrival_ms, last);
    last = r.arrival_ms;
    EXPECT_LT(r.arrival_ms, 120'000);
  }
  // 500 and 1000 expected; 5 standard deviations.
  EXPECT_NEAR(per_stage[0], 500, 5 * std::sqrt(500));
  EXPECT_NEAR(per_stage[1], 1000, 5 * std::sqrt(1000));
  EXPECT_DOUBLE_EQ(t.duration_ms(), 120'000);
}

TEST(SimWorkload, LengthsDoNotDependOnTheRates) {
  auto slow = make("C", 9, {{5, 100}});
  auto fast = make("C", 9, {{50, 10}});
  const std::size_t n = std::min(slow.requests.size(), fast.requests.size());
  ASSERT_GT(n, 100u);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(slow.requests[i].question_len, fast.requests[i].question_len);
    EXPECT_EQ(slow.requests[i].max_tokens, fast.requests[i].max_tokens);
  }
}

TEST(SimWorkload, MultiTurnSessionsAdvanceInOrder) {
  auto t = make("C", 5, {{20, 60}}, 0.05);  // 750 users, ~1200 requests -> many second turns
  std::map<uint64_t, int64_t> last_turn;
  int64_t continued = 0;
  for (const auto& r : t.requests) {
    auto it = last_turn.find(r.session);
    if (it == last_turn.end()) {
      EXPECT_EQ(r.turn, 0);
    } else {
      EXPECT_EQ(r.turn, it->second + 1);
      ++continued;
    }
    last_turn[r.session] = r.turn;
    EXPECT_LT(r.group, 150);
  }
  EXPECT_GT(continued, 100);
  // sharegpt: every request is its own single-turn session.
  auto s = make("sharegpt", 5, {{20, 10}});
  for (const auto& r : s.requests) {
    EXPECT_EQ(r.turn, 0);
    EXPECT_EQ(r.session, r.index);
  }
}

TEST(SimWorkload, OptionsAddHeadersPrioritiesAndCaps) {
  GenerateOptions o;
  o.stages = {{100, 10}};
  o.max_requests = 50;
  o.slo_ttft_ms = 500;
  o.sheddable_fraction = 1.0;
  auto t = workload::generate(*workload::preset("A"), o);
  ASSERT_EQ(t.requests.size(), 50u);
  EXPECT_EQ(t.requests[0].priority, -1);
  ASSERT_EQ(t.requests[0].headers.size(), 1u);
  EXPECT_EQ(t.requests[0].headers[0].first, "x-slo-ttft-ms");

  std::string err;
  EXPECT_FALSE(workload::parse_stages("1:2,x", &err));
  EXPECT_FALSE(workload::parse_stages("0:5", &err));
  EXPECT_FALSE(workload::parse_stages("", &err));
  auto ok = workload::parse_stages("2:30,4.5:10", &err);
  ASSERT_TRUE(ok);
  EXPECT_EQ(workload::format_stages(*ok), "2:30,4.5:10");
}

TEST(LoadClientSse, ParsesEventsSplitAnywhere) {
  const std::string stream =
      ": keep-alive\n\ndata: {\"a\":1}\n\ndata: line1\r\ndata: line2\r\n\r\nevent: x\ndata: "
      "[DONE]\n\n";
  for (std::size_t split = 0; split <= stream.size(); ++split) {
    std::vector<std::string> events;
    loadclient::SseParser p([&](std::string_view d) { events.emplace_back(d); });
    p.feed(std::string_view(stream).substr(0, split));
    p.feed(std::string_view(stream).substr(split));
    p.finish();
    ASSERT_EQ(events.size(), 3u) << split;
    EXPECT_EQ(events[0], "{\"a\":1}");
    EXPECT_EQ(events[1], "line1\nline2");
    EXPECT_EQ(events[2], "[DONE]");
  }
}

TEST(LoadClientConversation, CompletionsPromptsReSendTheConversation) {
  loadclient::RequestOptions opt;
  loadclient::Conversation c;
  c.reset("sys one two");
  auto b1 = Json::parse(c.body("q1 q2", 5, 0, opt));
  EXPECT_EQ(b1["prompt"], "sys one two q1 q2");
  EXPECT_EQ(b1["max_tokens"], 5);
  EXPECT_EQ(b1["stream"], true);
  EXPECT_EQ(b1["stream_options"]["include_usage"], true);
  EXPECT_FALSE(b1.contains("nvext"));
  EXPECT_EQ(c.last_prompt_words(), 5);
  c.answer(" a1 a2");
  auto b2 = Json::parse(c.body("q3", 5, -1, opt));
  EXPECT_EQ(b2["prompt"], "sys one two q1 q2 a1 a2 q3");
  EXPECT_EQ(b2["nvext"]["agent_hints"]["priority"], -1);
  c.drop_question();
  auto b3 = Json::parse(c.body("q4", 5, 0, opt));
  EXPECT_EQ(b3["prompt"], "sys one two q1 q2 a1 a2 q4");
}

TEST(LoadClientConversation, ChatSendsMessages) {
  loadclient::RequestOptions opt;
  opt.api = loadclient::Api::kChat;
  opt.stream = false;
  opt.vllm_priority = true;
  loadclient::Conversation c;
  c.reset("sys");
  c.body("hello there", 3, 0, opt);
  c.answer(" hi");
  auto b = Json::parse(c.body("again", 3, 2, opt));
  ASSERT_EQ(b["messages"].size(), 4u);
  EXPECT_EQ(b["messages"][0]["role"], "system");
  EXPECT_EQ(b["messages"][2]["role"], "assistant");
  EXPECT_EQ(b["messages"][3]["content"], "again");
  EXPECT_FALSE(b.contains("stream_options"));
  EXPECT_EQ(b["priority"], -2);
  EXPECT_EQ(c.last_prompt_words(), 5);
}

TEST(LoadClientResponse, AccumulatesAStreamWithUsage) {
  loadclient::ResponseAccumulator acc;
  acc.on_event(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})", 1);
  acc.on_event(R"({"choices":[{"index":0,"delta":{"content":" a"},"finish_reason":null}]})", 2);
  acc.on_event(R"({"choices":[{"index":0,"delta":{"content":" b"},"finish_reason":"length"}]})", 3);
  acc.on_event(
      R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":4}}})",
      4);
  EXPECT_FALSE(acc.done());
  acc.on_event("[DONE]", 5);
  EXPECT_TRUE(acc.done());
  EXPECT_EQ(acc.first_content_ms(), 2);  // the role chunk carries no content
  EXPECT_EQ(acc.text(), " a b");
  EXPECT_EQ(acc.content_chunks(), 2);
  EXPECT_EQ(acc.finish_reason(), "length");
  EXPECT_EQ(acc.cached_tokens(), 4);
  EXPECT_EQ(acc.completion_tokens(), 2);
  EXPECT_TRUE(acc.usage_after_finish());
  EXPECT_TRUE(acc.error().empty());

  loadclient::ResponseAccumulator bad;
  bad.on_event(R"({"object":"error","message":"boom","code":500})", 1);
  EXPECT_EQ(bad.error(), "boom");
  loadclient::ResponseAccumulator whole;
  whole.on_body(
      R"({"choices":[{"text":" x y","finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2}})",
      9);
  EXPECT_TRUE(whole.done());
  EXPECT_EQ(whole.first_content_ms(), 9);
}

TEST(LoadClientReport, DefinitionsAndPerStageSummary) {
  loadclient::RequestRecord r;
  r.ok = true;
  r.status = 200;
  r.sent_ms = 100;
  r.first_token_ms = 150;
  r.end_ms = 250;
  r.completion_tokens = 11;
  r.prompt_tokens = 100;
  r.cached_tokens = 64;
  r.slo_ttft_ms = 40;
  EXPECT_DOUBLE_EQ(r.ttft_ms(), 50);
  EXPECT_DOUBLE_EQ(r.e2e_ms(), 150);
  EXPECT_DOUBLE_EQ(*r.tpot_ms(), 10);
  EXPECT_DOUBLE_EQ(*r.ntpot_ms(), 150.0 / 11);

  auto p = loadclient::percentiles({1, 2, 3, 4, 5});
  EXPECT_DOUBLE_EQ(p.p50, 3);
  EXPECT_DOUBLE_EQ(p.mean, 3);
  EXPECT_DOUBLE_EQ(p.p90, 4.6);

  auto failed = r;
  failed.ok = false;
  failed.status = 500;
  failed.stage = 1;
  loadclient::SummaryInfo info;
  info.time_scale = 2;
  auto s = loadclient::summarize({r, failed}, {{1, 10}, {2, 10}}, info);
  EXPECT_EQ(s["overall"]["requests"], 2);
  EXPECT_DOUBLE_EQ(s["overall"]["success_rate"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(s["stages"][0]["ttft_ms"]["p50"].get<double>(), 100);  // x time scale
  EXPECT_DOUBLE_EQ(s["stages"][0]["prefix_cache_hit_ratio"].get<double>(), 0.64);
  EXPECT_DOUBLE_EQ(s["stages"][0]["slo_attainment"].get<double>(), 0.0);  // 100 > 40
  EXPECT_EQ(s["stages"][1]["errors"]["http_500"], 1);
  EXPECT_EQ(loadclient::to_json(r)["ttft_ms"], 50.0);
}

TEST(LoadClientReport, ComparisonTableSetsRunsSideBySide) {
  loadclient::RequestRecord r;
  r.ok = true;
  r.status = 200;
  r.sent_ms = 0;
  r.first_token_ms = 20;
  r.end_ms = 110;
  r.completion_tokens = 10;
  r.prompt_tokens = 100;
  r.cached_tokens = 75;
  auto fast = loadclient::summarize({r}, {{1, 10}}, {});
  r.first_token_ms = 80;
  r.end_ms = 170;
  r.cached_tokens = 10;
  auto slow = loadclient::summarize({r, r}, {{1, 10}}, {});
  const std::string t = loadclient::comparison_table({{"default", fast}, {"round-robin", slow}});
  std::vector<std::string> lines;
  std::stringstream ss(t);
  for (std::string l; std::getline(ss, l);) {
    lines.push_back(l);
  }
  ASSERT_GE(lines.size(), 7u) << t;
  EXPECT_NE(lines[0].find("default  round-robin"), std::string::npos) << t;
  auto row = [&lines](const std::string& label) {
    for (const auto& l : lines) {
      if (l.starts_with(label)) {
        return l;
      }
    }
    return std::string();
  };
  EXPECT_NE(row("requests answered").find("1 / 1        2 / 2"), std::string::npos) << t;
  EXPECT_NE(row("TTFT p50 (ms)").find("20.0         80.0"), std::string::npos) << t;
  EXPECT_NE(row("TTFT p95 vs 1st run").find("+0.0 %     +300.0 %"), std::string::npos) << t;
  EXPECT_NE(row("TPOT p50 (ms)").find("10.00        10.00"), std::string::npos) << t;
  EXPECT_NE(row("prefix cache hits").find("75.0 %       10.0 %"), std::string::npos) << t;
  EXPECT_EQ(row("SLO attainment"), "") << "no run sent SLOs: no row";
  // Every row has the same width: the columns line up.
  for (const auto& l : lines) {
    EXPECT_EQ(l.size(), lines[0].size()) << t;
  }
  // A summary without a field shows "-".
  EXPECT_NE(
      loadclient::comparison_table({{"a", fast}, {"empty", nlohmann::json::object()}}).find("-"),
      std::string::npos);
}

TEST(LoadClientChart, DrawsOneLinePerRunWithGapsWhereAWindowHasTooFewRequests) {
  loadclient::ChartRun fast{"default", {}}, slow{"round-robin & co", {}};
  for (int i = 0; i < 100; ++i) {
    const double at = i * 0.1;  // 10 s, stage 2 from 5 s
    fast.samples.push_back({at, at < 5 ? 0 : 1, 10.0 + i % 5, 100});
    if (at < 3 || at >= 6) {  // nothing answered between 3 and 6 s
      slow.samples.push_back({at, at < 5 ? 0 : 1, 40.0 + i % 5, 300});
    }
  }
  const std::string svg = loadclient::latency_chart_svg({fast, slow}, "A <trace>", 1);
  EXPECT_TRUE(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"")) << svg;
  EXPECT_TRUE(svg.ends_with("</svg>\n"));
  EXPECT_NE(svg.find("A &lt;trace&gt;"), std::string::npos) << "title escaped";
  EXPECT_NE(svg.find("round-robin &amp; co"), std::string::npos) << "label escaped";
  EXPECT_NE(svg.find(">stage 2</text>"), std::string::npos) << "stage starts marked";
  EXPECT_NE(svg.find("TTFT p95 (ms)"), std::string::npos);
  // Three panels x two runs; the slow run's lines restart after its gap ("M" twice per path).
  std::size_t paths = 0, restarted = 0;
  for (auto at = svg.find("<path d=\""); at != std::string::npos;
       at = svg.find("<path d=\"", at + 1)) {
    ++paths;
    const std::string d = svg.substr(at, svg.find('"', at + 9) - at);
    if (std::count(d.begin(), d.end(), 'M') == 2) {
      ++restarted;
    }
  }
  EXPECT_EQ(paths, 6u) << svg;
  EXPECT_EQ(restarted, 3u) << svg;
  // The y axis reaches the slow run's E2E of 300 ms.
  EXPECT_NE(svg.find(">300</text>"), std::string::npos) << svg;
  EXPECT_THROW(loadclient::latency_chart_svg({}, "t"), std::invalid_argument);
  EXPECT_THROW(loadclient::latency_chart_svg({{"empty", {}}}, "t"), std::invalid_argument);
}

}  // namespace
}  // namespace llmd
