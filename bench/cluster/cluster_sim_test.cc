// Tests of the virtual-time routing benchmark: determinism, accounting, the oracle's bound,
// the in-process model loop and the pipelines it builds. Small pools and short traces.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <sstream>

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

TEST_F(ClusterSimTest, TheRouterQueueHoldsRequestsWhileEveryPodIsSaturated) {
  // The EPP's RequestFlow with its router queue: at most two requests per pod are dispatched,
  // the rest wait (their wait is part of the TTFT the client sees), or time out while queued.
  const Scenario s = tiny("D", {{20, 3}, {120, 3}}, 2, 0.1);
  const auto trace = make_trace(s);
  RunConfig c = make_run_config(s, Strategy::kLoadPrefix322, kEppConfig);
  c.request_timeout_ms = 1500;
  const RunResult without = run_cluster(trace, c);
  epp::RouterQueueConfig queue;
  queue.saturation = epp::SaturationThresholds{};
  queue.saturation.in_flight_requests = 2;
  c.router_queue = queue;
  const RunResult with = run_cluster(trace, c);
  ASSERT_EQ(with.requests.size(), trace.requests.size());
  std::size_t queued = 0, queued_ok = 0, ok = 0, failed = 0;
  for (const auto& q : with.requests) {
    if (q.queued_ms > 0) {
      ++queued;
      queued_ok += q.ok ? 1 : 0;
    }
    if (q.ok) {
      ++ok;
      EXPECT_GE(q.ttft_ms, q.queued_ms);
      EXPECT_GE(q.e2e_ms, q.ttft_ms);
    } else {
      ++failed;
      EXPECT_FALSE(q.error.empty());
    }
  }
  EXPECT_EQ(ok + failed, trace.requests.size());
  EXPECT_GT(queued, 0u) << "saturated pods: some requests should wait";
  EXPECT_GT(queued_ok, 0u) << "a freed slot admits a waiter, which is then served";
  EXPECT_GT(ok, 0u);
  for (const auto& q : without.requests) {
    EXPECT_EQ(q.queued_ms, 0) << "no router queue, no wait";
  }
  int64_t dispatched = 0, per_pod = 0;
  for (const auto& q : with.requests) dispatched += q.pod >= 0 ? 1 : 0;
  for (const auto& p : with.pods) per_pod += p.requests;
  EXPECT_EQ(per_pod, dispatched) << "a request that left the queue was never dispatched";
}

// The retry path of the EPP's request flow, driven by the simulator: pod 0 becomes
// unreachable for a while. What it streamed breaks; what is sent to it before the next scrape
// notices is refused and served by the next ranked pod; then it is left out until it answers
// scrapes again, and is used again afterwards. A run with outages still repeats exactly.
TEST_F(ClusterSimTest, AnUnreachablePodIsRetriedAroundAndUsedAgainAfterwards) {
  const Scenario s = tiny("D", {{30, 12}}, 3, 0.05);
  const auto trace = make_trace(s);
  RunConfig c = make_run_config(s, Strategy::kLoadPrefix322, kEppConfig);
  c.scrape_interval_ms = 500;  // scrapes at 3.0 and 3.5 s: the outage goes unnoticed between
  c.outages = parse_pod_outages("0:3.1-6");
  const RunResult r = run_cluster(trace, c);
  ASSERT_EQ(r.requests.size(), trace.requests.size());
  EXPECT_GT(r.attempts_refused, 0) << "a dispatch before the next scrape meets the outage";
  EXPECT_GT(r.streams_broken, 0) << "pod 0 was serving when it became unreachable";
  std::size_t broken = 0, refused_failed = 0, during = 0, after = 0;
  for (const auto& q : r.requests) {
    if (!q.ok) {
      broken += q.error == "stream broken: pod unreachable" ? 1 : 0;
      refused_failed += q.error.rfind("HTTP 502", 0) == 0 ? 1 : 0;
      continue;
    }
    if (q.pod == 0 && q.sent_ms >= 3500 && q.sent_ms < 6000) {
      ++during;  // a scrape period after the outage began, the pod is out of the candidates
    }
    if (q.pod == 0 && q.sent_ms >= 6500) {
      ++after;
    }
  }
  EXPECT_EQ(broken, static_cast<std::size_t>(r.streams_broken));
  EXPECT_EQ(static_cast<int64_t>(refused_failed) + r.retries, r.attempts_refused)
      << "every refused attempt is retried once or answered 502";
  EXPECT_GT(r.retries, 0);
  EXPECT_EQ(during, 0u);
  EXPECT_GT(after, 0u) << "the pod answers scrapes again and is routed to";
  // Deterministic with outages too.
  const RunResult again = run_cluster(trace, c);
  ASSERT_EQ(again.requests.size(), r.requests.size());
  for (std::size_t i = 0; i < r.requests.size(); ++i) {
    EXPECT_EQ(again.requests[i].pod, r.requests[i].pod);
    EXPECT_EQ(again.requests[i].error, r.requests[i].error);
    EXPECT_EQ(again.requests[i].ttft_ms, r.requests[i].ttft_ms);
  }
}

TEST_F(ClusterSimTest, PodOutagesParseOrNameTheBadEntry) {
  const auto o = parse_pod_outages("0:10-20,3:1.5-2.5");
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[1].pod, 3);
  EXPECT_DOUBLE_EQ(o[1].from_ms, 1500);
  EXPECT_DOUBLE_EQ(o[1].to_ms, 2500);
  EXPECT_TRUE(parse_pod_outages("").empty());
  for (const std::string bad : {"0:10", "x:1-2", "0:2-1", "-1:1-2", "0:1-2x", "0:1-2,,1:1-2"}) {
    try {
      parse_pod_outages(bad);
      ADD_FAILURE() << bad << " parsed";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("POD:FROM-TO"), std::string::npos) << e.what();
    }
  }
  const Scenario s = tiny("D", {{10, 1}}, 2);
  RunConfig c = make_run_config(s, Strategy::kRoundRobin, kEppConfig);
  c.outages = parse_pod_outages("2:0-1");  // no pod 2 in a 2-pod pool
  EXPECT_THROW(run_cluster(make_trace(s), c), std::invalid_argument);
}

TEST_F(ClusterSimTest, SummariesSplitRequestsWithAndWithoutSloHeaders) {
  // Verdict v2 judges the two populations apart (suite_verdict.h).
  Scenario s = tiny("A", {{20, 2}, {60, 2}}, 2, 0.1);
  s.slo_ttft_ms = 40;
  s.slo_share = 0.5;
  const auto trace = make_trace(s);
  const RunResult r = run_cluster(trace, make_run_config(s, Strategy::kLoadPrefix111, kEppConfig));
  const auto sums = summarize(trace, r);
  std::size_t with = 0, met = 0, free_ok = 0;
  for (const auto& q : r.requests) {
    const bool slo = q.slo_ttft_ms.has_value() || q.slo_tpot_ms.has_value();
    with += slo ? 1 : 0;
    met += slo && q.meets_slo() ? 1 : 0;
    free_ok += !slo && q.ok ? 1 : 0;
  }
  ASSERT_GT(with, 0u);
  ASSERT_LT(with, r.requests.size());
  const Summary& t = sums.back();
  EXPECT_EQ(t.slo_requests, with);
  EXPECT_EQ(t.free_requests + t.slo_requests, t.requests);
  EXPECT_EQ(t.free_ttft.n, free_ok);
  EXPECT_DOUBLE_EQ(t.slo_pop_attainment, static_cast<double>(met) / static_cast<double>(with));
  for (const auto& sm : sums) EXPECT_EQ(sm.free_requests + sm.slo_requests, sm.requests);
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

// The cost-aware oracle charges a request's own prefill time times the pool's mean waiting
// queue: with no queue it decides as the greedy oracle; past saturation it pays for cache
// hits, so it keeps more of the prompts cached.
TEST_F(ClusterSimTest, CostAwareOracleIsGreedyWithoutQueuesAndKeepsMoreCachedInOverload) {
  const Scenario light = tiny("C", {{2, 4}}, 3, 0.1);
  const auto light_trace = make_trace(light);
  RunConfig greedy_cfg = make_run_config(light, Strategy::kOracle, kEppConfig);
  RunConfig cost_cfg = make_run_config(light, Strategy::kOracleCost, kEppConfig);
  const RunResult greedy_light = run_cluster(light_trace, greedy_cfg);
  const RunResult cost_light = run_cluster(light_trace, cost_cfg);
  ASSERT_EQ(greedy_light.requests.size(), cost_light.requests.size());
  for (std::size_t i = 0; i < greedy_light.requests.size(); ++i) {
    EXPECT_EQ(greedy_light.requests[i].pod, cost_light.requests[i].pod) << "request " << i;
  }

  const Scenario heavy = tiny("C", {{300, 3}}, 3, 0.1);
  const auto trace = make_trace(heavy);
  greedy_cfg = make_run_config(heavy, Strategy::kOracle, kEppConfig);
  cost_cfg = make_run_config(heavy, Strategy::kOracleCost, kEppConfig);
  const auto greedy = summarize(trace, run_cluster(trace, greedy_cfg)).back();
  const auto cost = summarize(trace, run_cluster(trace, cost_cfg)).back();
  ASSERT_EQ(greedy.ok, trace.requests.size());
  ASSERT_EQ(cost.ok, trace.requests.size());
  EXPECT_GT(greedy.ttft.p95, 200.0) << "the heavy stage must queue";
  EXPECT_GT(cost.prefix_hit_rate, greedy.prefix_hit_rate);
  std::cout << "hit rate greedy " << greedy.prefix_hit_rate << " cost " << cost.prefix_hit_rate
            << ", TTFT p95 " << greedy.ttft.p95 << " / " << cost.ttft.p95 << " ms\n";
}

// The goodput oracle is the greedy one until a request's TTFT SLO cannot be met on any probed
// pod; such a request joins the longest queue, so past saturation more requests meet their SLO
// than under the greedy oracle, and the ones sacrificed wait longer (suite discussion part 17).
TEST_F(ClusterSimTest, GoodputOracleSendsHopelessSloRequestsToTheLongestQueue) {
  Scenario heavy = tiny("D", {{20, 2}, {90, 4}}, 2, 0.1);
  heavy.slo_ttft_ms = 150;
  heavy.slo_share = 1;
  const auto trace = make_trace(heavy);
  RunConfig greedy_cfg = make_run_config(heavy, Strategy::kOracle, kEppConfig);
  RunConfig slo_cfg = make_run_config(heavy, Strategy::kOracleSlo, kEppConfig);
  const auto greedy = summarize(trace, run_cluster(trace, greedy_cfg));
  const auto slo = summarize(trace, run_cluster(trace, slo_cfg));
  ASSERT_EQ(greedy.back().ok, trace.requests.size());
  ASSERT_EQ(slo.back().ok, trace.requests.size());
  EXPECT_LT(greedy.back().slo_attainment, 0.9) << "the heavy stage must miss SLOs";
  EXPECT_GT(slo.back().slo_attainment, greedy.back().slo_attainment);
  EXPECT_GT(slo.back().ttft.p99, greedy.back().ttft.p99) << "the sacrificed wait longer";
  std::cout << "attainment greedy " << greedy.back().slo_attainment << " goodput "
            << slo.back().slo_attainment << ", TTFT p99 " << greedy.back().ttft.p99 << " / "
            << slo.back().ttft.p99 << " ms\n";
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

// Active-active replicas keep separate state: with round-robin each replica has its own
// counter, so two replicas taking turns send pairs of consecutive requests to the same pod,
// where one replica walks the pods one by one.
TEST_F(ClusterSimTest, EppReplicasEachKeepTheirOwnSchedulingState) {
  const Scenario s = tiny("sharegpt", {{30, 2}}, 3, 0.5);  // single-turn: dispatch = trace order
  const auto trace = make_trace(s);
  ASSERT_GT(trace.requests.size(), 20u);
  RunConfig one = make_run_config(s, Strategy::kRoundRobin, kEppConfig);
  RunConfig two = one;
  two.epp_replicas = 2;
  const RunResult a = run_cluster(trace, one);
  const RunResult b = run_cluster(trace, two);
  for (std::size_t i = 0; i < trace.requests.size(); ++i) {
    ASSERT_TRUE(a.requests[i].ok && b.requests[i].ok) << "request " << i;
    EXPECT_EQ(a.requests[i].pod, static_cast<int>(i % 3)) << "request " << i;
    EXPECT_EQ(b.requests[i].pod, static_cast<int>((i / 2) % 3)) << "request " << i;
  }
  two.epp_replicas = 0;
  EXPECT_THROW(run_cluster(trace, two), std::invalid_argument);
}

// Several replicas feed one trainer, or each its own (fitted on its share of the traffic).
TEST_F(ClusterSimTest, EppReplicasTrainTogetherOrEachOnItsShare) {
  const Scenario s = tiny("C", {{40, 3}, {60, 3}}, 3, 0.1);
  const auto trace = make_trace(s);
  RunConfig c = make_run_config(s, Strategy::kPredictedLeast, kEppConfig);
  c.retrain_interval_ms = 2000;
  c.epp_replicas = 2;
  const RunResult shared = run_cluster(trace, c);
  c.shared_training = false;
  const RunResult own = run_cluster(trace, c);
  ASSERT_FALSE(shared.retrains.empty());
  EXPECT_EQ(own.retrains.size(), 2 * shared.retrains.size()) << "two trainers, same cadence";
  // Each own trainer has about half the samples of the shared one at the end.
  const auto n = shared.retrains.size();
  const double whole = static_cast<double>(shared.retrains.back().ttft_samples);
  const double part = static_cast<double>(own.retrains[2 * n - 1].ttft_samples +
                                          own.retrains[2 * n - 2].ttft_samples);
  EXPECT_GT(whole, 100.0);
  EXPECT_NEAR(part / whole, 1.0, 0.1);
  EXPECT_LT(static_cast<double>(own.retrains.back().ttft_samples), 0.7 * whole);
  for (const auto* r : {&shared, &own}) {
    EXPECT_EQ(r->cycles_with_predictions, r->cycles);
  }
}

// Replicas that exchange what they learned: a conversation's next turn may reach the other
// replica, which then knows where its prefix is cached.
TEST_F(ClusterSimTest, EppReplicasThatShareFindMoreOfTheirConversationsCached) {
  const Scenario s = tiny("C", {{40, 3}, {60, 3}}, 4, 0.1);
  const auto trace = make_trace(s);
  RunConfig c = make_run_config(s, Strategy::kLoadPrefix111, kEppConfig);
  c.epp_replicas = 2;
  auto cached = [&](RunConfig::ReplicaSharing share) {
    c.replica_sharing = share;
    const RunResult r = run_cluster(trace, c);
    int64_t n = 0;
    for (const auto& q : r.requests) n += q.ok ? q.cached_tokens : 0;
    return n;
  };
  const int64_t apart = cached(RunConfig::ReplicaSharing::kNone),
                shared = cached(RunConfig::ReplicaSharing::kAtScrape);
  EXPECT_GT(shared, apart + apart / 20) << "apart " << apart << ", shared " << shared;
}

TEST_F(ClusterSimTest, PipelinesOfEveryStrategyLoad) {
  std::string err;
  const bool upstream_file = std::filesystem::exists(kEppConfig + "/upstream-pipeline.yaml");
  for (Strategy st : kAllStrategies) {
    const bool expected = !is_oracle(st) && (st != Strategy::kPredictedUpstream || upstream_file);
    auto y = pipeline_yaml(st, kEppConfig, &err);
    EXPECT_EQ(y.has_value(), expected) << strategy_name(st) << ": " << err;
    EXPECT_EQ(parse_strategy(strategy_key(st)), st);
    EXPECT_EQ(parse_strategy(strategy_name(st)), st);
  }
  const auto lp322 = pipeline_yaml(Strategy::kLoadPrefix322, kEppConfig, &err).value();
  EXPECT_NE(lp322.find("weight: 3"), std::string::npos) << lp322;
  EXPECT_NE(lp322.find("weight: 2"), std::string::npos) << lp322;
  const auto most = pipeline_yaml(Strategy::kPredictedMost, kEppConfig, &err).value();
  EXPECT_NE(most.find("headroomSelectionStrategy: most"), std::string::npos) << most;
  // Every strategy that has a pipeline runs end to end on a tiny trace.
  const Scenario s = tiny("A", {{30, 2}}, 2);
  const auto trace = make_trace(s);
  for (Strategy st : kAllStrategies) {
    if (st == Strategy::kPredictedUpstream && !upstream_file) continue;
    const RunResult r = run(s, trace, st);
    EXPECT_EQ(summarize(trace, r).back().ok, trace.requests.size()) << strategy_name(st);
  }
}

TEST_F(ClusterSimTest, MissingUpstreamPipelineIsAClearError) {
  std::string err;
  EXPECT_FALSE(pipeline_yaml(Strategy::kPredictedUpstream, "/nonexistent-llmd-config", &err));
  EXPECT_NE(err.find("upstream-pipeline.yaml"), std::string::npos) << err;
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
}

TEST_F(ClusterSimTest, ClocksFollowTheTimeScale) {
  Scenario s = tiny("C", {{10, 1}}, 2, 0.1);
  // Default: the time scale is the length scale.
  EXPECT_DOUBLE_EQ(s.effective_time_scale(), 0.1);
  RunConfig c = make_run_config(s, Strategy::kPredictedLeast, kEppConfig);
  EXPECT_DOUBLE_EQ(c.scrape_interval_ms, 5.0);      // 50 ms real x 0.1
  EXPECT_DOUBLE_EQ(c.retrain_interval_ms, 1000.0);  // 10 s real x 0.1
  EXPECT_DOUBLE_EQ(c.pool.kv_scale, 0.1);
  // Full length keeps the real clocks.
  s.length_scale = 1.0;
  c = make_run_config(s, Strategy::kPredictedLeast, kEppConfig);
  EXPECT_DOUBLE_EQ(c.scrape_interval_ms, 50.0);
  EXPECT_DOUBLE_EQ(c.retrain_interval_ms, 10000.0);
  // An explicit time scale wins, and the real-time base is an input.
  s.time_scale = 0.25;
  TimeBase base;
  base.scrape_real_ms = 20;
  base.retrain_real_s = 2;
  c = make_run_config(s, Strategy::kRoundRobin, kEppConfig, base);
  EXPECT_DOUBLE_EQ(c.scrape_interval_ms, 5.0);
  EXPECT_DOUBLE_EQ(c.retrain_interval_ms, 500.0);
  EXPECT_DOUBLE_EQ(scrape_interval_ms(s, base), 5.0);
  EXPECT_DOUBLE_EQ(retrain_interval_ms(s, base), 500.0);
  // Every scenario of the sets: the derived clocks are the real ones times its scale.
  for (const auto& set : {default_scenarios({}), holdout_scenarios({})}) {
    for (const auto& sc : set) {
      const RunConfig rc = make_run_config(sc, Strategy::kRoundRobin, kEppConfig);
      EXPECT_DOUBLE_EQ(rc.scrape_interval_ms, 50.0 * sc.effective_time_scale()) << sc.name;
      EXPECT_DOUBLE_EQ(rc.retrain_interval_ms, 10000.0 * sc.effective_time_scale()) << sc.name;
    }
  }
}

TEST_F(ClusterSimTest, TheRetrainCadenceFollowsTheScale) {
  // The model loop retrains on the derived interval: 1 virtual s at time scale 0.1.
  const Scenario s = tiny("C", {{40, 3}, {60, 3}}, 3, 0.1);
  const auto trace = make_trace(s);
  const RunResult r = run_cluster(trace, make_run_config(s, Strategy::kPredictedLeast, kEppConfig));
  ASSERT_GE(r.retrains.size(), 4u);
  for (std::size_t i = 0; i < r.retrains.size(); ++i) {
    EXPECT_DOUBLE_EQ(r.retrains[i].time_ms, 1000.0 * static_cast<double>(i + 1));
  }
}

TEST_F(ClusterSimTest, ScenarioSetsHonourStageLengthsAndSeeds) {
  SetOptions o;
  o.stage_seconds = 30;
  for (const auto& set : {default_scenarios(o), holdout_scenarios(o)}) {
    for (const auto& sc : set) {
      for (const auto& st : sc.stages) {
        if (!sc.own_stage_length) {
          EXPECT_DOUBLE_EQ(st.duration_s, 30.0) << sc.name;
        }
      }
    }
  }
  const auto def = default_scenarios({});
  const auto named = [&](const std::string& name) {
    return *std::find_if(def.begin(), def.end(), [&](const Scenario& s) { return s.name == name; });
  };
  EXPECT_DOUBLE_EQ(named("A").stages.front().duration_s, kDefaultStageSeconds);
  EXPECT_DOUBLE_EQ(named("scale100").stages.front().duration_s, 10.0);
  // The blog regime: few large pods at full length, >= 4 low/high alternations of 1:5.
  const Scenario blog = named("blog");
  EXPECT_LE(blog.pool.num_pods, 8);
  EXPECT_DOUBLE_EQ(blog.length_scale, 1.0);
  EXPECT_DOUBLE_EQ(blog.effective_time_scale(), 1.0);
  ASSERT_GE(blog.stages.size(), 8u);
  for (std::size_t i = 0; i + 1 < blog.stages.size(); i += 2) {
    EXPECT_DOUBLE_EQ(blog.stages[i + 1].rate, 5.0 * blog.stages[i].rate);
  }
  // Quick: three 5-s stages on small pools, saturation scaled with the pool.
  SetOptions q;
  q.quick = true;
  for (const auto& sc : default_scenarios(q)) {
    EXPECT_LE(sc.stages.size(), 3u) << sc.name;
    EXPECT_LE(sc.pool.num_pods, 2) << sc.name;
    for (const auto& st : sc.stages) EXPECT_DOUBLE_EQ(st.duration_s, 5.0) << sc.name;
  }
  // The seed reaches the trace, the engines and the scheduler.
  Scenario s = named("C");
  s.seed = 3;
  const RunConfig c = make_run_config(s, Strategy::kRoundRobin, kEppConfig);
  EXPECT_EQ(c.seed, 3u);
  EXPECT_EQ(c.pool.seed, 3u);
  EXPECT_EQ(make_trace(s).options.seed, 3u);
}

TEST_F(ClusterSimTest, StagesSplitAtSaturation) {
  for (const auto& set : {default_scenarios({}), holdout_scenarios({})}) {
    for (const auto& sc : set) {
      SCOPED_TRACE(sc.name);
      ASSERT_GT(sc.saturation_rps, 0);
      const auto below = below_saturation_stages(sc);
      const auto over = overload_stages(sc);
      EXPECT_EQ(below.size() + over.size(), sc.stages.size());
      EXPECT_FALSE(below.empty());
      for (int i : below)
        EXPECT_LE(sc.stages[static_cast<std::size_t>(i)].rate, 0.9 * sc.saturation_rps + 1e-6);
      for (int i : over)
        EXPECT_GT(sc.stages[static_cast<std::size_t>(i)].rate, 0.9 * sc.saturation_rps);
    }
  }
  Scenario unknown = tiny("C", {{10, 1}, {20, 1}});
  EXPECT_TRUE(below_saturation_stages(unknown).empty());
  EXPECT_TRUE(overload_stages(unknown).empty());
}

TEST_F(ClusterSimTest, HoldoutShapesDifferFromTheDefaultSet) {
  const auto def = default_scenarios({});
  const auto hold = holdout_scenarios({});
  ASSERT_GE(hold.size(), 4u);
  int with_slo = 0;
  for (const auto& h : hold) {
    with_slo += (h.slo_ttft_ms || h.slo_tpot_ms) ? 1 : 0;
    for (const auto& d : def) EXPECT_NE(h.name, d.name);
    const auto trace = make_trace(h);  // every shape generates
    EXPECT_GT(trace.requests.size(), 0u) << h.name;
  }
  EXPECT_GT(with_slo, 0);
  EXPECT_LT(with_slo, static_cast<int>(hold.size()));
  // Without shared prefixes: single turn, no system prompt.
  for (const auto& h : hold) {
    if (!h.unshared) continue;
    const auto trace = make_trace(h);
    for (const auto& r : trace.requests) {
      ASSERT_EQ(r.turn, 0);
    }
    EXPECT_TRUE(trace.system_prompt(0).empty());
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

// The per-pod residual correction through the real request flow, on the virtual clock: the
// deterministic counterpart of the e2e HeteroPoolStack test, whose pods run on wall time.
// One slow pod among three h100s: the shared model sees no pod identity and predicts the
// pool's mix; the EPP measures each pod's first and output tokens against the model, sets the
// slow pod apart (beyond PodResidual::kSignificance standard errors) and scales the
// predictions it schedules by. With the correction switched off in the pipeline the pod is
// still measured, but no prediction is scaled.
TEST_F(ClusterSimTest, ASlowerPodIsMeasuredAgainstTheModelAndItsPredictionsAreScaled) {
  // 600 requests: enough for pod-3 to be set apart (the first 320 are not); this run ends with
  // ttft x1.53, tpot x1.34. Deterministic: the same every run, whatever the machine does.
  Scenario s = tiny("B", {{40, 15}}, 4, 0.1);
  s.pool.num_slow = 1;
  const auto trace = make_trace(s);
  const RunResult r = run(s, trace, Strategy::kPredictedLeast, 2000);
  ASSERT_EQ(r.pods.size(), 4u);
  ASSERT_EQ(r.pods[3].profile, "slow");
  auto describe = [](const RunResult& x) {
    std::ostringstream o;
    for (const auto& p : x.pods) {
      o << p.name << " (" << p.profile << ", " << p.requests << " requests): measured ttft x"
        << p.max_ttft_residual_factor << " tpot x" << p.max_tpot_residual_factor
        << ", predictions ttft x" << p.max_ttft_prediction_scale << " tpot x"
        << p.max_tpot_prediction_scale << "\n";
    }
    return o.str();
  };
  std::cout << describe(r);
  const PodSummary& slow = r.pods[3];
  EXPECT_GT(slow.max_ttft_residual_factor, 1.25) << describe(r);
  EXPECT_GT(slow.max_tpot_residual_factor, 1.0) << describe(r);
  EXPECT_GT(slow.max_ttft_prediction_scale, 1.25) << describe(r);
  EXPECT_GT(slow.max_tpot_prediction_scale, 1.0) << describe(r);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.pods[i].max_ttft_residual_factor, 1.0)
        << "never slower than its pool; " << describe(r);
  }

  RunConfig off = make_run_config(s, Strategy::kPredictedLeast, kEppConfig);
  off.retrain_interval_ms = 2000;
  std::ifstream in(kEppConfig + "/default-pipeline.yaml");
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The correction is the producer's default: switch it off explicitly.
  const std::string producer = "- type: predicted-latency-producer";
  const auto at = yaml.find(producer);
  ASSERT_NE(at, std::string::npos);
  off.pipeline_override =
      yaml.insert(yaml.find('\n', at) + 1, "  parameters:\n    podResidualCorrection: false\n");
  const RunResult u = run_cluster(trace, off);
  EXPECT_GT(u.pods[3].max_ttft_residual_factor, 1.25) << describe(u);
  for (const auto& p : u.pods) {
    EXPECT_EQ(p.max_ttft_prediction_scale, 1.0) << describe(u);
    EXPECT_EQ(p.max_tpot_prediction_scale, 1.0) << describe(u);
  }
}

}  // namespace
}  // namespace llmd::cluster
