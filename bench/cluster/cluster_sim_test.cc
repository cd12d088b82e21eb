// Tests of the virtual-time routing benchmark: determinism, accounting, the oracle's bound,
// the in-process model loop and the pipelines it builds. Small pools and short traces.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "bench/cluster/cluster_sim.h"
#include "bench/cluster/scenarios.h"

namespace llmd::cluster {
namespace {

const std::string kEppConfig = std::string(LLMD_SOURCE_DIR) + "/epp/config";

Scenario tiny(std::string preset, std::vector<workload::Stage> stages, int pods = 3,
              double length_scale = 0.05) {
  Scenario s;
  s.name = "tiny";
  s.preset = std::move(preset);
  s.length_scale = length_scale;
  s.stages = std::move(stages);
  s.pool.num_pods = pods;
  s.seed = 7;
  return s;
}

RunResult run(const Scenario& s, const workload::Trace& trace, Strategy strategy,
              double retrain_ms = 2000) {
  RunConfig c = make_run_config(s, strategy, kEppConfig);
  c.retrain_interval_ms = retrain_ms;
  return run_cluster(trace, c);
}

double mean_ttft(const RunResult& r) {
  double sum = 0;
  std::size_t n = 0;
  for (const auto& q : r.requests) {
    if (q.ok) {
      sum += q.ttft_ms;
      ++n;
    }
  }
  return n ? sum / static_cast<double>(n) : 0;
}

class ClusterSimTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { spdlog::set_level(spdlog::level::warn); }
};

TEST_F(ClusterSimTest, SameSeedSameResults) {
  const Scenario s = tiny("C", {{15, 3}, {40, 3}});
  const auto trace = make_trace(s);
  ASSERT_GT(trace.requests.size(), 50u);
  for (Strategy st : {Strategy::kLoadPrefix111, Strategy::kPredictedLeast, Strategy::kOracle}) {
    SCOPED_TRACE(std::string(strategy_name(st)));
    const RunResult a = run(s, trace, st);
    const RunResult b = run(s, trace, st);
    ASSERT_EQ(a.requests.size(), b.requests.size());
    for (std::size_t i = 0; i < a.requests.size(); ++i) {
      const auto& x = a.requests[i];
      const auto& y = b.requests[i];
      ASSERT_EQ(x.pod, y.pod) << "request " << i;
      ASSERT_EQ(x.ok, y.ok);
      ASSERT_EQ(x.ttft_ms, y.ttft_ms);
      ASSERT_EQ(x.e2e_ms, y.e2e_ms);
      ASSERT_EQ(x.cached_tokens, y.cached_tokens);
      ASSERT_EQ(x.predicted_ttft_ms, y.predicted_ttft_ms);
      ASSERT_EQ(x.predicted_tpot_ms, y.predicted_tpot_ms);
    }
    EXPECT_EQ(a.end_ms, b.end_ms);
    EXPECT_EQ(a.retrains.size(), b.retrains.size());
  }
  // A different seed gives a different trace (and so different results).
  Scenario other = s;
  other.seed = 8;
  const auto trace2 = make_trace(other);
  EXPECT_NE(trace2.requests.size() == trace.requests.size() &&
                trace2.requests.front().arrival_ms == trace.requests.front().arrival_ms,
            true);
}

TEST_F(ClusterSimTest, EveryRequestIsAccountedFor) {
  // Saturated on purpose, with a short client timeout, so some requests fail.
  const Scenario s = tiny("D", {{20, 3}, {120, 3}}, 2, 0.1);
  const auto trace = make_trace(s);
  RunConfig c = make_run_config(s, Strategy::kLoadPrefix322, kEppConfig);
  c.request_timeout_ms = 1500;
  const RunResult r = run_cluster(trace, c);
  ASSERT_EQ(r.requests.size(), trace.requests.size());
  std::size_t ok = 0, failed = 0;
  int64_t dispatched = 0;
  for (std::size_t i = 0; i < r.requests.size(); ++i) {
    const auto& q = r.requests[i];
    EXPECT_EQ(q.index, trace.requests[i].index);
    EXPECT_GE(q.sent_ms, q.scheduled_ms) << "a turn is never sent before its arrival";
    if (q.ok) {
      ++ok;
      EXPECT_TRUE(q.error.empty());
      EXPECT_GT(q.ttft_ms, 0);
      EXPECT_GE(q.e2e_ms, q.ttft_ms);
      EXPECT_EQ(q.output_tokens, trace.requests[i].max_tokens);
      EXPECT_LE(q.cached_tokens, q.prompt_tokens);
    } else {
      ++failed;
      EXPECT_FALSE(q.error.empty());
    }
    dispatched += q.pod >= 0 ? 1 : 0;
  }
  EXPECT_EQ(ok + failed, trace.requests.size());
  EXPECT_GT(ok, 0u);
  EXPECT_GT(failed, 0u) << "the scenario should be saturated enough to time requests out";
  int64_t per_pod = 0;
  for (const auto& p : r.pods) per_pod += p.requests;
  EXPECT_EQ(per_pod, dispatched);
  // Summaries cover every request exactly once.
  const auto sums = summarize(trace, r);
  std::size_t staged = 0;
  for (const auto& sm : sums) staged += sm.stage >= 0 ? sm.requests : 0;
  EXPECT_EQ(staged, trace.requests.size());
  EXPECT_EQ(sums.back().requests, trace.requests.size());
  EXPECT_EQ(sums.back().ok, ok);
}

TEST_F(ClusterSimTest, MultiTurnSessionsKeepOrder) {
  const Scenario s = tiny("C", {{40, 4}});
  const auto trace = make_trace(s);
  const RunResult r = run(s, trace, Strategy::kRoundRobin);
  std::map<uint64_t, double> last_end;
  std::size_t later_turns = 0;
  for (std::size_t i = 0; i < trace.requests.size(); ++i) {
    const auto& tr = trace.requests[i];
    const auto& q = r.requests[i];
    ASSERT_TRUE(q.ok);
    auto it = last_end.find(tr.session);
    if (it != last_end.end()) {
      EXPECT_GE(q.sent_ms, it->second) << "turn " << tr.turn << " sent before the previous ended";
      ++later_turns;
    }
    last_end[tr.session] = q.sent_ms + q.e2e_ms;
    if (tr.turn > 0) {
      // The conversation is re-sent: the prompt grows with the history.
      EXPECT_GT(q.prompt_tokens, tr.question_len);
    }
  }
  EXPECT_GT(later_turns, 0u);
}

TEST_F(ClusterSimTest, OracleIsNotWorseThanRoundRobinWhenSaturated) {
  const Scenario s = tiny("D", {{20, 3}, {90, 3}}, 2, 0.1);
  const auto trace = make_trace(s);
  const RunResult rr = run(s, trace, Strategy::kRoundRobin);
  RunConfig c = make_run_config(s, Strategy::kOracle, kEppConfig);  // exact: every pod probed
  const RunResult oracle = run_cluster(trace, c);
  const auto srr = summarize(trace, rr).back();
  const auto sor = summarize(trace, oracle).back();
  ASSERT_EQ(srr.ok, trace.requests.size());
  ASSERT_EQ(sor.ok, trace.requests.size());
  // Saturated: round-robin queues build up (TTFT far above one prefill).
  EXPECT_GT(srr.ttft.p95, 200.0);
  EXPECT_LE(mean_ttft(oracle), mean_ttft(rr));
  EXPECT_LE(sor.ttft.p50, srr.ttft.p50);
  EXPECT_GT(oracle.oracle_probes, static_cast<int64_t>(trace.requests.size()));
}

TEST_F(ClusterSimTest, PredictedLatencyTrainsOnItsOwnRequests) {
  const Scenario s = tiny("C", {{40, 3}, {60, 3}}, 3, 0.1);
  const auto trace = make_trace(s);
  const RunResult r = run(s, trace, Strategy::kPredictedLeast, 2000);
  EXPECT_EQ(r.cycles_with_predictions, r.cycles) << "cold start serves the default models";
  int published = 0;
  for (const auto& x : r.retrains) published += x.published ? 1 : 0;
  EXPECT_GT(published, 0);
  EXPECT_GT(r.retrains.back().ttft_samples, 100u);
  double first_model_ms = -1;
  for (const auto& x : r.retrains) {
    if (x.published) {
      first_model_ms = x.time_ms;
      break;
    }
  }
  ASSERT_GT(first_model_ms, 0);
  std::size_t cold = 0, trained = 0;
  for (const auto& q : r.requests) {
    ASSERT_GE(q.predicted_ttft_ms, 0) << "every pick carries the picked pod's prediction";
    if (q.sent_ms < first_model_ms) {
      EXPECT_EQ(q.predicted_ttft_ms, 10.0) << "cold start: the trainer's 10 ms default model";
      ++cold;
    } else {
      EXPECT_NE(q.predicted_ttft_ms, 10.0) << "a trained model replaced the default";
      ++trained;
    }
  }
  EXPECT_GT(cold, 0u);
  EXPECT_GT(trained, 0u);
  const auto total = summarize(trace, r).back();
  EXPECT_GT(total.pred_ttft.n, 0u);
  EXPECT_LT(total.pred_ttft.mape_percent, 200.0);
}

TEST_F(ClusterSimTest, PipelinesOfEveryStrategyLoad) {
  std::string err;
  for (Strategy st : kAllStrategies) {
    auto y = pipeline_yaml(st, kEppConfig, &err);
    EXPECT_EQ(y.has_value(), st != Strategy::kOracle) << strategy_name(st) << ": " << err;
  }
  const auto lp322 = pipeline_yaml(Strategy::kLoadPrefix322, kEppConfig, &err).value();
  EXPECT_NE(lp322.find("weight: 3"), std::string::npos) << lp322;
  EXPECT_NE(lp322.find("weight: 2"), std::string::npos) << lp322;
  const auto most = pipeline_yaml(Strategy::kPredictedMost, kEppConfig, &err).value();
  EXPECT_NE(most.find("headroomSelectionStrategy: most"), std::string::npos) << most;
  // Every strategy runs end to end on a tiny trace.
  const Scenario s = tiny("A", {{30, 2}}, 2);
  const auto trace = make_trace(s);
  for (Strategy st : kAllStrategies) {
    const RunResult r = run(s, trace, st);
    EXPECT_EQ(summarize(trace, r).back().ok, trace.requests.size()) << strategy_name(st);
  }
}

TEST_F(ClusterSimTest, HashFreeFormIsExactForUnsharedPrompts) {
  // sharegpt never shares a prefix: engines without block hashes time requests identically.
  const Scenario s = tiny("sharegpt", {{60, 3}}, 3, 0.5);
  const auto trace = make_trace(s);
  RunConfig c = make_run_config(s, Strategy::kRoundRobin, kEppConfig);
  c.hash_prompts = HashPrompts::kAlways;
  const RunResult with = run_cluster(trace, c);
  c.hash_prompts = HashPrompts::kAuto;
  const RunResult without = run_cluster(trace, c);
  ASSERT_EQ(with.requests.size(), without.requests.size());
  for (std::size_t i = 0; i < with.requests.size(); ++i) {
    ASSERT_EQ(with.requests[i].ttft_ms, without.requests[i].ttft_ms) << i;
    ASSERT_EQ(with.requests[i].e2e_ms, without.requests[i].e2e_ms) << i;
  }
}

TEST_F(ClusterSimTest, HeterogeneousPoolUsesTheSlowProfile) {
  Scenario s = tiny("B", {{40, 3}}, 4);
  s.pool.num_slow = 2;
  const auto trace = make_trace(s);
  const RunResult r = run(s, trace, Strategy::kRoundRobin);
  ASSERT_EQ(r.pods.size(), 4u);
  EXPECT_EQ(r.pods[0].profile, "h100");
  EXPECT_EQ(r.pods[3].profile, "slow");
  // Round-robin spreads evenly regardless of speed; slow pods answer later.
  double fast = 0, slow = 0;
  std::size_t nf = 0, ns = 0;
  for (const auto& q : r.requests) {
    if (!q.ok) continue;
    (q.pod >= 2 ? slow : fast) += q.e2e_ms;
    (q.pod >= 2 ? ns : nf) += 1;
  }
  ASSERT_GT(nf, 0u);
  ASSERT_GT(ns, 0u);
  EXPECT_GT(slow / ns, fast / nf);
}

}  // namespace
}  // namespace llmd::cluster
