// Decisions you can see, through the real EPP: the x-llmd-debug request header answered with
// x-llmd-decision, and the sampled decision log switched on and off by a config reload.
#include <gtest/gtest.h>

#include <iostream>
#include <regex>
#include <set>
#include <thread>

#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

// The JSON of the decision log line of request `id` in `log` (null when there is none).
Json decision_line(const std::string& log, const std::string& id) {
  const std::string key = "\"request_id\":\"" + id + "\"";
  for (std::size_t at = log.find("decision {"); at != std::string::npos;
       at = log.find("decision {", at + 1)) {
    const auto begin = at + std::string_view("decision ").size();
    const auto end = log.find('\n', begin);
    const std::string line = log.substr(begin, end == std::string::npos ? end : end - begin);
    if (line.find(key) != std::string::npos) {
      return Json::parse(line, nullptr, false);
    }
  }
  return nullptr;
}

// Polls the EPP's log for `needle` (the line is written before the response, but the log is
// read through a pipe): the deadline only bounds a failure.
bool log_shows(const Stack& s, const std::string& needle) {
  for (int i = 0; i < 100; ++i) {
    if (s.epp->log().find(needle) != std::string::npos) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class DecisionStack : public StackTest {
 protected:
  void SetUp() override {
    StackOptions o;
    o.pods = 4;
    o.predictors = 1;
    o.epp_args = {"--allow-debug-header", "true"};
    // A model whose rule sends it to a pool without pods: the scheduler refuses it (503).
    o.extra_config =
        "decisionLog: {sampleRate: 1, maxLinesPerSecond: 1000}\n"
        "loadBalancing:\n  type: gateway-load-balancing-config\n  rules:\n  - id: nowhere\n"
        "    type: latency-based-routing\n    when: {models: [nowhere-model]}\n"
        "    load_balance_targets:\n    - target: pool:empty\n";
    start(std::move(o));
  }
  http::ClientResponse explained(const std::string& id, const std::string& prompt,
                                 std::vector<http::Header> extra = {}) {
    std::vector<http::Header> h = {{"x-llmd-debug", "1"}, {"x-request-id", id}};
    h.insert(h.end(), extra.begin(), extra.end());
    return stack_->complete(prompt, 2, true, h);
  }
};

TEST_F(DecisionStack, TheDebugHeaderAndTheDecisionLogShowTheCandidatesAndThePick) {
  // Until the predictor answers, the decision says so (predictions=no and why).
  std::string header;
  for (int i = 0; i < 100; ++i) {
    auto r = explained("warm-" + std::to_string(i), words(5, "warm" + std::to_string(i)));
    ASSERT_EQ(r.status, 200) << r.body;
    header = std::string(r.header("x-llmd-decision"));
    ASSERT_FALSE(header.empty()) << "x-llmd-debug was not answered";
    if (header.find("predictions=yes") != std::string::npos) {
      // A model not trained yet predicts one constant: the header then says what broke the tie.
      std::set<std::string> ttfts;
      const std::regex ttft(":ttft=([0-9.]+)");
      for (auto it = std::sregex_iterator(header.begin(), header.end(), ttft);
           it != std::sregex_iterator(); ++it) {
        ttfts.insert((*it)[1]);
      }
      if (ttfts.size() == 1) {
        EXPECT_NE(header.find(" tiebreak=\""), std::string::npos) << header;
        std::cout << "untrained: x-llmd-decision: " << header << "\n";
      }
      break;
    }
    EXPECT_NE(header.find("fallback=\""), std::string::npos) << header;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(header.find("predictions=yes"), std::string::npos) << header;

  auto r = explained("explain-me", words(30, "explained"), {{"x-llm-d-slo-ttft-ms", "60000"}});
  ASSERT_EQ(r.status, 200) << r.body;
  header = std::string(r.header("x-llmd-decision"));
  EXPECT_NE(header.find(" slo=ttft:60000 "), std::string::npos) << header;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(header, m, std::regex("^pick=pod-([0-9]+) "))) << header;
  const int picked = std::stoi(m[1]);
  EXPECT_EQ(r.header("x-gateway-destination-endpoint"), stack_->pod_address(picked))
      << "the header names the pod that answered";
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::regex_search(header, std::regex("pod-" + std::to_string(i) +
                                                     ":ttft=[0-9.]+,tpot=[0-9.]+,"
                                                     "ttft_headroom=[0-9.]+")))
        << "pod-" << i << " with its predicted TTFT and headroom under the SLO: " << header;
  }
  // removed= only on a pod a filter removed, each named in filters=.
  std::smatch filters;
  ASSERT_TRUE(std::regex_search(header, filters, std::regex(" filters=([^ ]*)"))) << header;
  const std::string steps = "," + filters[1].str();
  const std::regex removed("removed=([^;]*)");
  for (auto it = std::sregex_iterator(header.begin(), header.end(), removed);
       it != std::sregex_iterator(); ++it) {
    EXPECT_NE(steps.find("," + (*it)[1].str() + ":"), std::string::npos)
        << (*it)[1] << " is not a filter: " << header;
  }
  EXPECT_NE(header.find(",score="), std::string::npos) << header;
  EXPECT_NE(header.find(" filters="), std::string::npos) << header;

  ASSERT_TRUE(log_shows(*stack_, "\"request_id\":\"explain-me\"")) << stack_->epp->log();
  const Json line = decision_line(stack_->epp->log(), "explain-me");
  ASSERT_TRUE(line.is_object()) << stack_->epp->log();
  EXPECT_EQ(line["pick"], "pod-" + std::to_string(picked));
  EXPECT_EQ(line["outcome"], "picked");
  EXPECT_EQ(line["predictions"], true);
  ASSERT_EQ(line["candidates"].size(), 4u) << line.dump();
  EXPECT_EQ(line["candidates"][0]["name"], line["pick"]);
  for (const auto& c : line["candidates"]) {
    EXPECT_TRUE(c.contains("ttft_ms") && c.contains("tpot_ms")) << c.dump();
    EXPECT_TRUE(c.contains("ttft_headroom_ms")) << c.dump();
    EXPECT_TRUE(c.contains("score") || c.contains("removed_by")) << c.dump();
    EXPECT_TRUE(!c.contains("removed_by") || !c["removed_by"].get<std::string>().empty())
        << c.dump();
  }
  EXPECT_FALSE(line["filters"].empty()) << line.dump();
  // What an operator sees, in the test's output.
  std::cout << "x-llmd-decision: " << header << "\ndecision " << line.dump() << "\n";
  EXPECT_FALSE(line["scorers"].empty()) << line.dump();

  // A request that does not ask gets no header (its decision is still logged).
  auto plain = stack_->complete(words(5, "plain"), 2, true, {{"x-request-id", "plain"}});
  ASSERT_EQ(plain.status, 200);
  EXPECT_EQ(plain.header("x-llmd-decision"), "");
  ASSERT_TRUE(log_shows(*stack_, "\"request_id\":\"plain\""));
  EXPECT_GT(metric_sum(stack_->metrics(), "llmd_epp_decision_log_lines_total{outcome=\"written\""),
            0);

  // A refusal the scheduler decided carries the header and is logged.
  auto refused = stack_->complete(words(5, "nowhere"), 2, false,
                                  {{"x-llmd-debug", "1"}, {"x-request-id", "refused"}},
                                  Json{{"model", "nowhere-model"}});
  ASSERT_EQ(refused.status, 503) << refused.body;
  const std::string why(refused.header("x-llmd-decision"));
  EXPECT_TRUE(why.starts_with("outcome=no_candidates")) << why;
  EXPECT_NE(why.find("reason=\"no ready endpoints\""), std::string::npos) << why;
  ASSERT_TRUE(log_shows(*stack_, "\"request_id\":\"refused\""));
  EXPECT_EQ(decision_line(stack_->epp->log(), "refused")["outcome"], "no_candidates");
}

TEST_F(DecisionStack, TheDecisionLogIsSwitchedAtRunTimeByAConfigReload) {
  ASSERT_EQ(stack_->complete(words(5, "on"), 2, false, {{"x-request-id", "logged-1"}}).status, 200);
  ASSERT_TRUE(log_shows(*stack_, "\"request_id\":\"logged-1\""));

  stack_->options_.extra_config = "decisionLog: {sampleRate: 0}\n";
  stack_->write_pool(stack_->options_.pipeline);
  ASSERT_TRUE(log_shows(*stack_, "decision log reconfigured: sample rate 0,"))
      << stack_->epp->log();
  ASSERT_EQ(stack_->complete(words(5, "off"), 2, false, {{"x-request-id", "not-logged"}}).status,
            200);

  // Back on without the key: the flag's default (0) would keep it off, so the file sets it.
  stack_->options_.extra_config = "decisionLog: {sampleRate: 1}\n";
  stack_->write_pool(stack_->options_.pipeline);
  ASSERT_TRUE(log_shows(*stack_, "decision log reconfigured: sample rate 1,"))
      << stack_->epp->log();
  ASSERT_EQ(stack_->complete(words(5, "again"), 2, false, {{"x-request-id", "logged-2"}}).status,
            200);
  ASSERT_TRUE(log_shows(*stack_, "\"request_id\":\"logged-2\""));
  // Lines are written in order: logged-2's line is there, so not-logged's would be too.
  EXPECT_EQ(stack_->epp->log().find("\"request_id\":\"not-logged\""), std::string::npos);
}

}  // namespace
}  // namespace llmd::testing
