// LatencyRouter: rule matching, window arithmetic, warm-up, the seed's A/B/C/D example,
// adaptation and recovery, failures, reconfiguration. Time points are injected.
#include "epp/routing/latency_router.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/epp/test_util.h"

namespace llmd::epp::routing {
namespace {

using epp::testing::FixedRng;
using std::chrono::minutes;
using std::chrono::seconds;

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);

LoadBalancingConfig parse_ok(std::string_view text) {
  auto parsed = parse_load_balancing_config_text(text);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    ADD_FAILURE() << *error;
    return {};
  }
  return std::get<LoadBalancingConfig>(std::move(parsed));
}

// Rule `r` for model `m` over pools a, b, c, d (as many as `targets`).
LoadBalancingConfig pools(int targets, std::string_view settings = "{}") {
  std::string list;
  for (int i = 0; i < targets; ++i) {
    list += std::string(list.empty() ? "" : ", ") + "{target: 'pool:" + char('a' + i) + "'}";
  }
  return parse_ok("type: gateway-load-balancing-config\nsettings: " + std::string(settings) +
                  "\nrules:\n- {id: r, type: latency-based-routing, when: {models: [m]},\n"
                  "   load_balance_targets: [" +
                  list + "]}\n");
}

RouteQuery query(std::string_view model = "m") {
  return RouteQuery{model, "", nullptr};
}

void record_n(LatencyRouter& router, const std::string& target, int n, double ms,
              Clock::time_point at) {
  for (int i = 0; i < n; ++i) {
    router.record("r", target, ms, true, at);
  }
}

LatencyRouter::TargetStatus status_of(const LatencyRouter& router, const std::string& target,
                                      Clock::time_point now) {
  for (auto& s : router.status(now)) {
    if (s.target == target) {
      return s;
    }
  }
  ADD_FAILURE() << "no status for " << target;
  return {};
}

// Traffic share per target over `n` routes with a seeded Rng.
std::map<std::string, int> spread(LatencyRouter& router, int n, Clock::time_point now) {
  Rng rng(42);
  std::map<std::string, int> counts;
  for (int i = 0; i < n; ++i) {
    auto d = router.route(query(), rng, now);
    counts[d ? d->target.target : "<none>"]++;
  }
  return counts;
}

// --- matching ---

class MatchTest : public ::testing::Test {
 protected:
  LoadBalancingConfig config_ = parse_ok(R"(
type: gateway-load-balancing-config
rules:
- {id: gold, type: latency-based-routing, load_balance_targets: [{target: 'pool:g'}],
   when: {models: [m], subjects: [team-a, team-b], metadata: {tier: gold, region: eu}}}
- {id: team, type: latency-based-routing, load_balance_targets: [{target: 'pool:t'}],
   when: {models: [m], subjects: [team-a]}}
- {id: any, type: latency-based-routing, load_balance_targets: [{target: 'pool:x'}],
   when: {models: [m, n]}}
- {id: shadowed, type: latency-based-routing, load_balance_targets: [{target: 'pool:y'}],
   when: {models: [n]}}
)");
  std::string match(std::string_view model, std::string_view subject = "",
                    const std::map<std::string, std::string>* metadata = nullptr) {
    const LatencyRule* rule = match_rule(config_, RouteQuery{model, subject, metadata});
    return rule ? rule->id : "<none>";
  }
};

TEST_F(MatchTest, ModelsMatchExactly) {
  EXPECT_EQ(match("m"), "any");
  EXPECT_EQ(match("n"), "any");
  EXPECT_EQ(match("M"), "<none>");
  EXPECT_EQ(match("m2"), "<none>");
}

TEST_F(MatchTest, SubjectsRestrictWhenListed) {
  EXPECT_EQ(match("m", "team-a"), "team");
  EXPECT_EQ(match("m", "team-b"), "any");  // `team` lists only team-a
  EXPECT_EQ(match("m", ""), "any");        // a rule with subjects never matches no subject
}

TEST_F(MatchTest, MetadataNeedsEveryPairExtraRequestPairsAreFine) {
  std::map<std::string, std::string> all{{"tier", "gold"}, {"region", "eu"}, {"x", "y"}};
  std::map<std::string, std::string> partial{{"tier", "gold"}};
  std::map<std::string, std::string> wrong{{"tier", "gold"}, {"region", "us"}};
  EXPECT_EQ(match("m", "team-b", &all), "gold");
  EXPECT_EQ(match("m", "team-b", &partial), "any");
  EXPECT_EQ(match("m", "team-b", &wrong), "any");
  EXPECT_EQ(match("m", "team-c", &all), "any");  // metadata alone is not enough
}

TEST_F(MatchTest, FirstMatchWins) {
  std::map<std::string, std::string> all{{"tier", "gold"}, {"region", "eu"}};
  EXPECT_EQ(match("m", "team-a", &all), "gold");  // gold, team and any all match
  EXPECT_EQ(match("n"), "any");                   // never `shadowed`
}

TEST_F(MatchTest, RouteOfUnmatchedModelIsNulloptWithoutDrawing) {
  LatencyRouter router(config_);
  FixedRng rng;
  EXPECT_FALSE(router.route(query("unknown"), rng, t0).has_value());
  EXPECT_EQ(rng.draws, 0);
}

TEST(LatencyRouterTest, DecisionCarriesTheTarget) {
  LatencyRouter router(parse_ok(R"(
type: gateway-load-balancing-config
rules:
- id: r
  type: latency-based-routing
  when: {models: [m]}
  load_balance_targets:
  - {target: 'http://10.0.0.7:8000/openai', override_params: {model: llama-east}}
)"));
  FixedRng rng;
  auto d = router.route(query(), rng, t0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->rule_id, "r");
  EXPECT_EQ(d->target_index, 0u);
  EXPECT_EQ(d->target.host, "10.0.0.7");
  EXPECT_EQ(d->target.base_path, "/openai");
  EXPECT_EQ(d->target.override_params["model"], "llama-east");
  EXPECT_TRUE(d->warm_up);
  EXPECT_EQ(rng.draws, 1);
}

// --- window arithmetic ---

TEST(LatencyRouterTest, RequestCutOffKeepsLast100) {
  LatencyRouter router(pools(1));
  record_n(router, "pool:a", 50, 10000, t0);
  record_n(router, "pool:a", 100, 100, t0 + seconds(1));
  auto s = status_of(router, "pool:a", t0 + seconds(2));
  EXPECT_EQ(s.samples, 100u);
  EXPECT_DOUBLE_EQ(s.average_ms, 100);
}

TEST(LatencyRouterTest, TimeCutOffDropsSamplesOlderThan20Minutes) {
  LatencyRouter router(pools(1));
  record_n(router, "pool:a", 30, 1000, t0);
  record_n(router, "pool:a", 10, 100, t0 + minutes(15));
  auto at_20 = status_of(router, "pool:a", t0 + minutes(20));  // exactly 20 min old: kept
  EXPECT_EQ(at_20.samples, 40u);
  EXPECT_DOUBLE_EQ(at_20.average_ms, (30 * 1000.0 + 10 * 100.0) / 40);
  auto later = status_of(router, "pool:a", t0 + minutes(21));
  EXPECT_EQ(later.samples, 10u);  // fewer than 100: the time cut-off holds fewer
  EXPECT_DOUBLE_EQ(later.average_ms, 100);
}

TEST(LatencyRouterTest, WhicheverCutOffHoldsFewer) {
  LatencyRouter router(pools(1));
  for (int i = 0; i < 150; ++i) {  // one request every 10 s, from t0 on
    router.record("r", "pool:a", i, true, t0 + seconds(10 * i));
  }
  Clock::time_point last = t0 + seconds(1490);
  auto now = status_of(router, "pool:a", last);
  EXPECT_EQ(now.samples, 100u);  // 20 min holds 121 of them: the count cut-off holds fewer
  EXPECT_DOUBLE_EQ(now.average_ms, (50 + 149) / 2.0);
  auto later = status_of(router, "pool:a", last + minutes(10));
  EXPECT_EQ(later.samples, 61u);  // 20 min back from here reaches i = 89: time holds fewer
  EXPECT_DOUBLE_EQ(later.average_ms, (89 + 149) / 2.0);
}

// --- warm-up ---

TEST(LatencyRouterTest, TwoSamplesAreUnjudgedThreeAreJudged) {
  LatencyRouter router(pools(2));
  record_n(router, "pool:a", 3, 100, t0);
  record_n(router, "pool:b", 2, 10000, t0);
  EXPECT_FALSE(status_of(router, "pool:b", t0).judged);
  FixedRng pick_second({0.9});
  auto d = router.route(query(), pick_second, t0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->target.target, "pool:b");  // slow but unjudged: still a candidate
  EXPECT_TRUE(d->warm_up);
  auto counts = spread(router, 1000, t0);
  EXPECT_GT(counts["pool:b"], 400);
  EXPECT_GT(counts["pool:a"], 400);

  record_n(router, "pool:b", 1, 10000, t0);
  EXPECT_TRUE(status_of(router, "pool:b", t0).judged);
  FixedRng again({0.9});
  d = router.route(query(), again, t0);
  EXPECT_EQ(d->target.target, "pool:a");
  EXPECT_FALSE(d->warm_up);
  EXPECT_EQ(spread(router, 1000, t0)["pool:a"], 1000);
}

TEST(LatencyRouterTest, NewTargetsSpreadAtRandom) {
  LatencyRouter router(pools(3));
  auto counts = spread(router, 3000, t0);
  for (const char* t : {"pool:a", "pool:b", "pool:c"}) {
    EXPECT_NEAR(counts[t], 1000, 150) << t;
  }
}

// --- the seed's example ---

TEST(LatencyRouterTest, SeedExampleOnlyFastTargetsGetTraffic) {
  LatencyRouter router(pools(4));
  record_n(router, "pool:a", 3, 500, t0);
  record_n(router, "pool:b", 4, 550, t0);
  record_n(router, "pool:c", 5, 650, t0);
  record_n(router, "pool:d", 3, 700, t0);
  auto counts = spread(router, 10000, t0);
  EXPECT_EQ(counts["pool:c"], 0);
  EXPECT_EQ(counts["pool:d"], 0);
  EXPECT_NEAR(counts["pool:a"], 5000, 500);
  EXPECT_NEAR(counts["pool:b"], 5000, 500);
  EXPECT_EQ(counts["pool:a"] + counts["pool:b"], 10000);
  auto b = status_of(router, "pool:b", t0);
  auto c = status_of(router, "pool:c", t0);
  EXPECT_TRUE(b.fast);
  EXPECT_TRUE(c.judged);
  EXPECT_FALSE(c.fast);
}

// --- adaptation and recovery ---

TEST(LatencyRouterTest, TrafficFollowsTheFastTargetAndSlowTargetsRecover) {
  LatencyRouter router(pools(2));
  record_n(router, "pool:a", 5, 100, t0);
  record_n(router, "pool:b", 5, 1000, t0);
  EXPECT_EQ(spread(router, 1000, t0)["pool:a"], 1000);

  // A slows down: its average passes 1.2 x B's, so traffic moves to B.
  record_n(router, "pool:a", 20, 5000, t0 + minutes(1));
  EXPECT_EQ(spread(router, 1000, t0 + minutes(1))["pool:b"], 1000);

  // Only B gets traffic now and stays at 1000 ms; A's slow samples age out.
  record_n(router, "pool:b", 10, 1000, t0 + minutes(15));
  Clock::time_point later = t0 + minutes(22);
  EXPECT_FALSE(status_of(router, "pool:a", later).judged);
  auto counts = spread(router, 1000, later);
  EXPECT_NEAR(counts["pool:a"], 500, 100);  // A is measured again (warm-up)
  EXPECT_NEAR(counts["pool:b"], 500, 100);

  // A is fast again once re-measured.
  record_n(router, "pool:a", 3, 100, later);
  EXPECT_EQ(spread(router, 1000, later)["pool:a"], 1000);
}

// --- failures ---

TEST(LatencyRouterTest, FailureCountsAsThePenalty) {
  LatencyRouter router(pools(2, "{failurePenaltyMs: 2000}"));
  router.record("r", "pool:a", 5, false, t0);
  router.record("r", "pool:a", 5, false, t0);
  router.record("r", "pool:a", 5000, false, t0);  // a slower failure keeps its real time
  EXPECT_DOUBLE_EQ(status_of(router, "pool:a", t0).average_ms, (2000 + 2000 + 5000) / 3.0);
  router.record("r", "pool:b", 5, false, t0);
  EXPECT_DOUBLE_EQ(status_of(router, "pool:b", t0).average_ms, 2000);
}

TEST(LatencyRouterTest, RecordIgnoresUnknownPairsAndNonFiniteTimes) {
  LatencyRouter router(pools(1));
  router.record("r", "pool:zz", 5, true, t0);
  router.record("other", "pool:a", 5, true, t0);
  router.record("r", "pool:a", std::nan(""), true, t0);
  EXPECT_EQ(status_of(router, "pool:a", t0).samples, 0u);
}

// --- reconfiguration ---

TEST(LatencyRouterTest, ReconfigureKeepsStatsOfSurvivingPairs) {
  LatencyRouter router(pools(3));
  record_n(router, "pool:a", 3, 100, t0);
  record_n(router, "pool:b", 3, 200, t0);
  auto snapshot = router.config();

  // Rule r keeps a and c (b removed, d added); rule `s` is new and also lists pool:a.
  router.reconfigure(parse_ok(R"(
type: gateway-load-balancing-config
settings: {windowRequests: 2, minSamples: 2}
rules:
- {id: s, type: latency-based-routing, when: {models: [x]},
   load_balance_targets: [{target: 'pool:a'}]}
- {id: r, type: latency-based-routing, when: {models: [m]},
   load_balance_targets: [{target: 'pool:d'}, {target: 'pool:c'}, {target: 'pool:a'}]}
)"));
  auto status = router.status(t0);
  ASSERT_EQ(status.size(), 4u);
  EXPECT_EQ(status[0].rule_id, "s");
  EXPECT_EQ(status[0].samples, 0u);  // statistics are per (rule, target)
  EXPECT_EQ(status[1].target, "pool:d");
  EXPECT_EQ(status[1].samples, 0u);
  EXPECT_EQ(status[3].target, "pool:a");
  EXPECT_EQ(status[3].samples, 2u);  // kept, trimmed to the new windowRequests
  EXPECT_TRUE(status[3].judged);

  router.record("r", "pool:b", 1, true, t0);  // an in-flight request of the old config
  EXPECT_EQ(snapshot->rules.size(), 1u);      // the old snapshot is unchanged
  EXPECT_EQ(router.config()->rules.size(), 2u);
}

// --- threads ---

TEST(LatencyRouterTest, ConcurrentRouteAndRecord) {
  LatencyRouter router(pools(3));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&router, t] {
      Rng rng(t);
      for (int i = 0; i < 2000; ++i) {
        auto d = router.route(query(), rng, t0);
        router.record(d->rule_id, d->target.target, 100 + d->target_index, true, t0);
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  std::size_t total = 0;
  for (const auto& s : router.status(t0)) {
    total += s.samples;
    EXPECT_LE(s.samples, 100u);
  }
  EXPECT_GE(total, 100u);
}

}  // namespace
}  // namespace llmd::epp::routing
