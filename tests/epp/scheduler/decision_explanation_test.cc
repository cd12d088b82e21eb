// Decisions you can see: the SchedulingCycle's DecisionExplanation (asked for by a request, or
// sampled by the DecisionLog), its two bounded formats, and the log's sampling and line budget.
#include "epp/scheduler/decision_explanation.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <prometheus/registry.h>

#include "epp/plugins/common/params.h"
#include "epp/plugins/register.h"
#include "epp/scheduler/config_loader.h"
#include "epp/scheduler/decision_log.h"
#include "epp/scheduler/scheduling_cycle.h"
#include "epp/scheduler/metrics.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

using testing::FixedRng;
using testing::pod;

class DefaultPipelineExplained : public ::testing::Test {
 protected:
  DefaultPipelineExplained() {
    register_builtin_plugins(registry_);
    auto r = load_pipeline_file(std::string(LLMD_SOURCE_DIR) + "/epp/config/default-pipeline.yaml",
                                registry_, services_.handle(), &metrics_);
    EXPECT_TRUE(r.ok()) << r.error;
    director_ = std::make_unique<SchedulingCycle>(r.pipeline, &metrics_, &log_);
  }
  static std::vector<Endpoint> pods() {
    std::vector<Endpoint> out;
    for (const char* name : {"a", "b", "c"}) {
      Endpoint e = pod(name, 0.5, 1);
      e.dispatched = 2;
      out.push_back(e);
    }
    return out;
  }
  PluginRegistry registry_;
  testing::TestServices services_;
  prometheus::Registry prom_;
  SchedulerMetrics metrics_{prom_};
  std::vector<std::string> lines_;
  DecisionLog log_{DecisionLogConfig{}, [this](const std::string& l) { lines_.push_back(l); },
                   &prom_};
  std::unique_ptr<SchedulingCycle> director_;
};

TEST_F(DefaultPipelineExplained, ARequestThatAsksGetsCandidatesFiltersScoresAndThePick) {
  const SchedulingRequest first = testing::request(std::string(400, 'w'));
  FixedRng rng({}, 0.5);  // no exploration (0.5 > 0.01)
  services_.source.answers = {{300, 10}, {80, 10}, {250, 10}};
  auto r = director_->schedule(first, pods(), rng);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.explanation, nullptr) << "explained without being asked";

  // The same prompt again: b holds it, the strict affinity gate keeps only b.
  SchedulingRequest again = first;
  again.explain = true;
  services_.source.answers = {{90, 11}, {95, 12}, {70, 13}};
  auto r2 = director_->schedule(again, pods(), rng);
  ASSERT_TRUE(r2.ok());
  ASSERT_NE(r2.explanation, nullptr);
  const DecisionExplanation& e = *r2.explanation;
  EXPECT_EQ(e.request_id, "req-1");
  EXPECT_EQ(e.outcome, "picked");
  EXPECT_EQ(e.picked, r2.picked->name());
  EXPECT_EQ(e.picked, "b");
  EXPECT_TRUE(e.predictions_used);
  EXPECT_EQ(e.fallback, "");
  ASSERT_EQ(e.candidates.size(), 3u);
  EXPECT_DOUBLE_EQ(*e.candidates[1].predicted_ttft_ms, r2.picked->latency->predicted_ttft_ms);
  EXPECT_DOUBLE_EQ(*e.candidates[1].prefix_score, 1.0);
  // The filter that removed a and c is named, on the step and on each pod.
  ASSERT_FALSE(e.filters.empty());
  const FilterDecision& strict = e.filters.front();
  EXPECT_EQ(strict.type, "prefix-cache-affinity-filter");
  EXPECT_EQ(strict.in, 3u);
  EXPECT_EQ(strict.removed, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(e.candidates[0].removed_by, strict.name);
  EXPECT_EQ(e.candidates[2].removed_by, strict.name);
  EXPECT_FALSE(e.candidates[0].score.has_value());
  ASSERT_TRUE(e.candidates[1].score.has_value());
  ASSERT_EQ(r2.scores.size(), 1u);
  EXPECT_DOUBLE_EQ(*e.candidates[1].score, r2.scores[0].score);
  ASSERT_FALSE(e.scorers.empty());
  EXPECT_EQ(e.candidates[1].scorer_scores.size(), e.scorers.size());
  EXPECT_FALSE(e.picker.empty());
  EXPECT_TRUE(lines_.empty()) << "the log samples nothing at rate 0";
  // removed= names the filter on the two pods it removed, and only there.
  const std::string header = decision_header_value(e, 10, 2048);
  EXPECT_NE(header.find("a:ttft="), std::string::npos) << header;
  std::size_t removed = 0;
  for (auto at = header.find("removed="); at != std::string::npos;
       at = header.find("removed=", at + 1)) {
    EXPECT_EQ(header.compare(at, 8 + strict.name.size(), "removed=" + strict.name), 0) << header;
    ++removed;
  }
  EXPECT_EQ(removed, 2u) << header;
  // Distinct predictions decided: no tie-break to explain.
  EXPECT_TRUE(e.tie_breaks.empty()) << e.tie_breaks.front();
  EXPECT_EQ(header.find("tiebreak="), std::string::npos) << header;
}

// The request's SLOs, and each candidate's headroom against them (SLO - predicted), so a
// client sees which pods were predicted to meet the SLO it sent.
TEST_F(DefaultPipelineExplained, EachCandidatesHeadroomAgainstTheRequestsSlos) {
  services_.source.answers = {{90, 11}, {300, 12}, {70, 60}};
  SchedulingRequest req = testing::request(std::string(200, 'h'));
  req.slo_ttft_ms = 250;
  req.slo_tpot_ms = 50;
  req.streaming = true;  // TPOT is neutral (headroom 0) for a request that does not stream
  req.explain = true;
  FixedRng rng({}, 0.5);
  auto r = director_->schedule(req, pods(), rng);
  ASSERT_TRUE(r.ok());
  ASSERT_NE(r.explanation, nullptr);
  const DecisionExplanation& e = *r.explanation;
  ASSERT_EQ(e.candidates.size(), 3u);
  for (const auto& c : e.candidates) {
    ASSERT_TRUE(c.ttft_headroom_ms && c.tpot_headroom_ms && c.predicted_ttft_ms) << c.name;
    EXPECT_NEAR(*c.ttft_headroom_ms, 250 - *c.predicted_ttft_ms, 1e-9) << c.name;
    EXPECT_NEAR(*c.tpot_headroom_ms, 50 - *c.predicted_tpot_ms, 1e-9) << c.name;
  }
  EXPECT_LT(*e.candidates[1].ttft_headroom_ms, 0) << "b is predicted to miss the TTFT SLO";
  EXPECT_LT(*e.candidates[2].tpot_headroom_ms, 0) << "c is predicted to miss the TPOT SLO";
  const std::string header = decision_header_value(e, 10, 2048);
  EXPECT_NE(header.find(" slo=ttft:250,tpot:50 "), std::string::npos) << header;
  for (const auto& c : e.candidates) {
    EXPECT_NE(header.find(fmt::format("{}:ttft={:.1f},tpot={:.1f},ttft_headroom={:.1f},"
                                      "tpot_headroom={:.1f}",
                                      c.name, *c.predicted_ttft_ms, *c.predicted_tpot_ms,
                                      *c.ttft_headroom_ms, *c.tpot_headroom_ms)),
              std::string::npos)
        << header;
  }
  const auto j = decision_to_json(e, 10);
  EXPECT_EQ(j["slo_ttft_ms"], 250);
  for (const auto& c : j["candidates"]) {
    EXPECT_TRUE(c.contains("ttft_headroom_ms") && c.contains("tpot_headroom_ms")) << c.dump();
  }

  // Only the SLO the request has: a TTFT SLO alone shows TTFT headroom alone; none, none.
  req.slo_tpot_ms.reset();
  r = director_->schedule(req, pods(), rng);
  ASSERT_NE(r.explanation, nullptr);
  for (const auto& c : r.explanation->candidates) {
    EXPECT_TRUE(c.ttft_headroom_ms.has_value()) << c.name;
    EXPECT_FALSE(c.tpot_headroom_ms.has_value()) << c.name;
  }
  req.slo_ttft_ms.reset();
  r = director_->schedule(req, pods(), rng);
  ASSERT_NE(r.explanation, nullptr);
  const std::string none = decision_header_value(*r.explanation, 10, 2048);
  EXPECT_EQ(none.find("headroom="), std::string::npos) << none;
}

// A model not trained yet predicts one constant for every pod: predictions=yes, yet they rank
// nothing. The decision says what did (the scorer's fallback, the picker's rotation).
TEST_F(DefaultPipelineExplained, EqualPredictionsSayWhatBrokeTheTie) {
  services_.source.answers = {{100, 10}, {100, 10}, {100, 10}};
  SchedulingRequest req = testing::request(std::string(200, 't'));
  req.explain = true;
  log_.configure({.sample_rate = 1, .max_lines_per_second = 100});
  FixedRng rng({}, 0.5);
  auto r = director_->schedule(req, pods(), rng);
  ASSERT_TRUE(r.ok());
  ASSERT_NE(r.explanation, nullptr);
  const DecisionExplanation& e = *r.explanation;
  EXPECT_TRUE(e.predictions_used);
  ASSERT_EQ(e.tie_breaks.size(), 2u) << ::testing::PrintToString(e.tie_breaks);
  EXPECT_EQ(e.tie_breaks[0], e.scorers.at(0).name +
                                 ": equal predictions for 3 pods: ranked by "
                                 "prefill work (prompt tokens in flight plus the request's "
                                 "uncached ones)");
  EXPECT_EQ(e.tie_breaks[1], e.picker +
                                 ": equal predictions: rotated over the 3 best-scored "
                                 "pods (least recently picked)");
  const std::string header = decision_header_value(e, 10, 2048);
  EXPECT_NE(header.find(" predictions=yes "), std::string::npos) << header;
  EXPECT_NE(header.find(" tiebreak=\"" + e.tie_breaks[0] + "; " + e.tie_breaks[1] + "\""),
            std::string::npos)
      << header;
  ASSERT_EQ(lines_.size(), 1u);
  auto j = nlohmann::json::parse(lines_[0].substr(std::string_view("decision ").size()));
  EXPECT_EQ(j["tie_breaks"], nlohmann::json(e.tie_breaks)) << lines_[0];
}

TEST_F(DefaultPipelineExplained, NoPredictionsIsTheFallbackReason) {
  services_.source.fail = true;
  SchedulingRequest req = testing::request();
  req.explain = true;
  FixedRng rng({}, 0.5);
  auto r = director_->schedule(req, pods(), rng);
  ASSERT_TRUE(r.ok());
  ASSERT_NE(r.explanation, nullptr);
  EXPECT_FALSE(r.explanation->predictions_used);
  EXPECT_NE(r.explanation->fallback.find("no predictions"), std::string::npos)
      << r.explanation->fallback;

  req.prediction_enabled = false;  // x-prediction-based-scheduling: false
  r = director_->schedule(req, pods(), rng);
  ASSERT_NE(r.explanation, nullptr);
  EXPECT_NE(r.explanation->fallback.find("x-prediction-based-scheduling"), std::string::npos)
      << r.explanation->fallback;
}

TEST_F(DefaultPipelineExplained, TheSampledLogWritesOneJsonLinePerDecision) {
  log_.configure({.sample_rate = 1, .max_lines_per_second = 100, .max_candidates = 2});
  FixedRng rng({}, 0.5);
  auto r = director_->schedule(testing::request(), pods(), rng);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.explanation, nullptr) << "a logged request did not ask for the header";
  ASSERT_EQ(lines_.size(), 1u);
  ASSERT_TRUE(lines_[0].starts_with("decision {"));
  auto j = nlohmann::json::parse(lines_[0].substr(std::string_view("decision ").size()));
  EXPECT_EQ(j["pick"], r.picked->name());
  EXPECT_EQ(j["outcome"], "picked");
  ASSERT_EQ(j["candidates"].size(), 2u);  // bounded: the pick, the retry target
  EXPECT_EQ(j["candidates"][0]["name"], r.picked->name());
  EXPECT_EQ(j["candidates"][1]["name"], r.fallback->name());
  EXPECT_TRUE(j["candidates"][0].contains("ttft_ms"));
  EXPECT_TRUE(j["candidates"][0].contains("tpot_ms"));
  EXPECT_TRUE(j["candidates"][0].contains("score"));
  EXPECT_EQ(j["candidates_more"], 1);
  EXPECT_FALSE(j["filters"].empty());

  log_.configure({.sample_rate = 0});  // switched off at run time
  director_->schedule(testing::request(), pods(), rng);
  EXPECT_EQ(lines_.size(), 1u);
}

TEST_F(DefaultPipelineExplained, ADenialIsExplained) {
  // A sheddable request with an SLO no pod meets, every pod busy and warm: the admitter sheds.
  services_.source.answers = {{300, 10}, {300, 10}, {300, 10}};
  SchedulingRequest req = testing::request();
  req.priority = -1;
  req.slo_ttft_ms = 10;
  req.explain = true;
  FixedRng rng({}, 0.5);
  auto r = director_->schedule(req, pods(), rng);
  ASSERT_EQ(r.outcome, ScheduleResult::Outcome::kDenied);
  ASSERT_NE(r.explanation, nullptr);
  EXPECT_EQ(r.explanation->outcome, "denied");
  EXPECT_NE(r.explanation->reason.find("admitter"), std::string::npos) << r.explanation->reason;
  EXPECT_EQ(r.explanation->candidates.size(), 3u);
  const std::string header = decision_header_value(*r.explanation, 10, 1024);
  EXPECT_TRUE(header.starts_with("outcome=denied")) << header;
  EXPECT_NE(header.find(" slo=ttft:10 priority=-1"), std::string::npos)
      << "the SchedulingCycle copies the request's SLO and priority: " << header;
  // The admitter decided before any filter ran: no pod was removed, and each is shown with
  // the headroom that got the request shed.
  EXPECT_EQ(header.find("removed="), std::string::npos) << header;
  for (const auto& c : r.explanation->candidates) {
    ASSERT_TRUE(c.ttft_headroom_ms.has_value()) << c.name;
    EXPECT_LT(*c.ttft_headroom_ms, 0) << c.name;
    EXPECT_NE(
        header.find(fmt::format("{}:ttft={:.1f},tpot={:.1f},ttft_headroom={:.1f}", c.name,
                                *c.predicted_ttft_ms, *c.predicted_tpot_ms, *c.ttft_headroom_ms)),
        std::string::npos)
        << header;
  }
  for (const auto& c : decision_to_json(*r.explanation, 10)["candidates"]) {
    EXPECT_FALSE(c.contains("removed_by")) << c.dump();
  }
}

TEST(DirectorExplain, NoCandidatesIsExplained) {
  auto pipeline = std::make_shared<Pipeline>();
  testing::TestServices s;
  PluginRegistry r;
  register_builtin_plugins(r);
  auto picker = std::dynamic_pointer_cast<const Picker>(
      (*r.find("max-score-picker"))("max", nullptr, s.handle()).plugin);
  pipeline->profiles.emplace_back("p", std::vector<Stage<Filter>>{}, std::vector<ScorerStage>{},
                                  Stage<Picker>{picker});
  SchedulingCycle d(pipeline);
  SchedulingRequest req = testing::request();
  req.explain = true;
  FixedRng rng;
  auto result = d.schedule(req, {}, rng);
  ASSERT_NE(result.explanation, nullptr);
  EXPECT_EQ(result.explanation->outcome, "no_candidates");
  EXPECT_EQ(result.explanation->reason, "no ready endpoints");
}

DecisionExplanation many_pods(int n) {
  DecisionExplanation e;
  e.request_id = "r";
  e.profile = "default";
  e.outcome = "picked";
  e.predictions_used = true;
  e.filters.push_back({"strict", "prefix-cache-affinity-filter", static_cast<std::size_t>(n), {}});
  for (int i = 0; i < n; ++i) {
    CandidateDecision c;
    c.name = "pod-" + std::to_string(i);
    c.predicted_ttft_ms = 100.0 + i;
    c.predicted_tpot_ms = 10.0;
    c.prefix_score = 0.5;
    if (i % 10 == 9) {
      c.removed_by = "strict";
      e.filters[0].removed.push_back(c.name);
    } else {
      c.score = static_cast<double>(i) / n;
    }
    e.candidates.push_back(c);
  }
  e.picked = "pod-3";
  e.retry = "pod-98";
  return e;
}

TEST(DecisionFormat, ShownListsThePickTheRetryThenTheBestScores) {
  const DecisionExplanation e = many_pods(100);
  auto shown = e.shown(5);
  ASSERT_EQ(shown.size(), 5u);
  EXPECT_EQ(shown[0]->name, "pod-3");
  EXPECT_EQ(shown[1]->name, "pod-98");
  EXPECT_EQ(shown[2]->name, "pod-97");  // pod-99 was removed by the filter
  EXPECT_EQ(shown[3]->name, "pod-96");
  EXPECT_EQ(shown[4]->name, "pod-95");
  EXPECT_EQ(e.shown(1).size(), 1u);
}

TEST(DecisionFormat, TheHeaderIsBoundedAndCountsWhatItLeftOut) {
  const DecisionExplanation e = many_pods(100);
  const std::string h = decision_header_value(e, 10, 400);
  EXPECT_LE(h.size(), 400u);
  EXPECT_TRUE(h.starts_with("pick=pod-3 retry=pod-98 profile=default predictions=yes")) << h;
  EXPECT_NE(h.find("filters=strict:100>90"), std::string::npos) << h;
  EXPECT_NE(h.find("candidates=pod-3:ttft=103.0,tpot=10.0,prefix=0.50,score=0.030"),
            std::string::npos)
      << h;
  const auto plus = h.rfind(";+");
  ASSERT_NE(plus, std::string::npos) << h;
  const std::size_t listed = static_cast<std::size_t>(std::count(h.begin(), h.end(), ';'));
  EXPECT_EQ(std::stoul(h.substr(plus + 2)), 100 - listed) << h;
  // With room, at most max_candidates are listed.
  const std::string wide = decision_header_value(e, 10, 100000);
  EXPECT_NE(wide.find(";+90"), std::string::npos) << wide;
}

// The request as scheduled: its SLOs and priority (from headers or its objective), so a client
// sees which SLO and priority the EPP took from what it sent.
TEST(DecisionFormat, TheRequestsSloAndPriorityAreShown) {
  DecisionExplanation e = many_pods(2);
  e.objective = "batch";
  e.slo_ttft_ms = 250;
  e.slo_tpot_ms = 12.5;
  e.priority = -1;
  e.strict_priority = 2;
  const std::string h = decision_header_value(e, 10, 1000);
  EXPECT_NE(h.find(" predictions=yes slo=ttft:250,tpot:12.5 priority=-1 tier=2 filters="),
            std::string::npos)
      << h;
  const auto j = decision_to_json(e, 10);
  EXPECT_EQ(j["objective"], "batch");
  EXPECT_EQ(j["slo_ttft_ms"], 250);
  EXPECT_EQ(j["slo_tpot_ms"], 12.5);
  EXPECT_EQ(j["priority"], -1);
  EXPECT_EQ(j["strict_priority"], 2);
  // Nothing set: nothing said in the header; the log line still has the priority (0).
  const DecisionExplanation plain = many_pods(2);
  const std::string p = decision_header_value(plain, 10, 1000);
  EXPECT_EQ(p.find(" slo="), std::string::npos) << p;
  EXPECT_EQ(p.find(" priority="), std::string::npos) << p;
  EXPECT_EQ(p.find(" tier="), std::string::npos) << p;
  const auto pj = decision_to_json(plain, 10);
  EXPECT_FALSE(pj.contains("slo_ttft_ms") || pj.contains("objective"));
  EXPECT_EQ(pj["priority"], 0);
  e.slo_tpot_ms.reset();
  e.priority = 0;
  e.strict_priority = 0;
  EXPECT_NE(decision_header_value(e, 10, 1000).find(" slo=ttft:250 filters="), std::string::npos);
}

TEST(DecisionFormat, TheHeaderCarriesNoControlCharacters) {
  DecisionExplanation e = many_pods(2);
  e.reason = "bad\r\nInjected: yes \"quoted\"";
  e.picked = "";
  e.outcome = "no_candidates";
  const std::string h = decision_header_value(e, 10, 1000);
  for (char c : h) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(c);
  }
  EXPECT_NE(h.find("reason=\"bad??Injected: yes ?quoted?\""), std::string::npos) << h;
}

TEST(DecisionFormat, TheLogLineBoundsFilterRemovals) {
  const DecisionExplanation e = many_pods(100);
  auto j = decision_to_json(e, 3);
  EXPECT_EQ(j["filters"][0]["removed"].size(), 3u);
  EXPECT_EQ(j["filters"][0]["removed_more"], 7);
  EXPECT_EQ(j["candidates"].size(), 3u);
  EXPECT_EQ(j["candidates_more"], 97);
}

TEST(DecisionLogTest, TheLineBudgetRefusesABurstAndTheNextLineSaysHowMany) {
  auto now = testing::kNow;
  std::vector<std::string> lines;
  prometheus::Registry registry;
  DecisionLog log(
      {.sample_rate = 1, .max_lines_per_second = 2},
      [&lines](const std::string& l) { lines.push_back(l); }, &registry, [&now] { return now; });
  DecisionExplanation e = many_pods(3);
  int sampled = 0;
  for (int i = 0; i < 5; ++i) {
    if (log.sample()) {
      ++sampled;
      log.write(e);
    }
  }
  EXPECT_EQ(sampled, 2);  // a burst of one second's budget
  EXPECT_EQ(log.rate_limited(), 3u);
  now += std::chrono::milliseconds(500);  // half a second refills one line
  ASSERT_TRUE(log.sample());
  log.write(e);
  EXPECT_FALSE(log.sample());
  ASSERT_EQ(lines.size(), 3u);
  auto j = nlohmann::json::parse(lines[2].substr(std::string_view("decision ").size()));
  EXPECT_EQ(j["rate_limited_before"], 3);
  EXPECT_EQ(log.written(), 3u);
}

TEST(DecisionLogTest, RateZeroNeverSamplesAndConfigIsValidated) {
  DecisionLog log({}, [](const std::string&) { FAIL() << "wrote a line"; });
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(log.sample());
  }
  EXPECT_EQ(log.rate_limited(), 0u);
  EXPECT_EQ((DecisionLogConfig{.sample_rate = 1.5}).validate().find("sampleRate"), 0u);
  EXPECT_EQ((DecisionLogConfig{.max_lines_per_second = 0}).validate().find("maxLinesPerSecond"),
            0u);
  EXPECT_EQ((DecisionLogConfig{.max_candidates = 0}).validate().find("maxCandidates"), 0u);
  EXPECT_EQ(DecisionLogConfig{}.validate(), "");
}

}  // namespace
}  // namespace llmd::epp
