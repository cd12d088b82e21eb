// The generalization suite's generator and probe reading: plain functions, no simulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "bench/cluster/suite.h"

namespace llmd::cluster {
namespace {

bool same(const SuiteParams& a, const SuiteParams& b) {
  return a.index == b.index && a.seed == b.seed && a.pods == b.pods && a.mid == b.mid &&
         a.slow == b.slow && a.preset == b.preset && a.mix_preset == b.mix_preset &&
         a.mix_share == b.mix_share && a.sharing == b.sharing && a.ladder == b.ladder &&
         a.load == b.load && a.slo_share == b.slo_share && a.slo_ttft_x == b.slo_ttft_x &&
         a.slo_tpot_x == b.slo_tpot_x && a.length_scale == b.length_scale && a.oracle == b.oracle;
}

TEST(SuiteGenerator, TheSameSeedGivesTheSameScenariosAndALargerSuiteExtendsASmallerOne) {
  const SuiteGenerator g;
  const auto a = g.generate(7, 40);
  const auto b = g.generate(7, 40);
  const auto c = g.generate(7, 10);
  ASSERT_EQ(a.size(), 40u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(same(a[i], b[i])) << i;
    EXPECT_EQ(a[i].describe(), b[i].describe());
    if (i < c.size()) {
      EXPECT_TRUE(same(a[i], c[i])) << i;
    }
  }
  const auto other = g.generate(8, 40);
  int differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    differ += same(a[i], other[i]) ? 0 : 1;
  }
  EXPECT_GT(differ, 35) << "another suite seed draws other scenarios";
}

TEST(SuiteGenerator, ParametersStayInTheirRangesAndCoverThem) {
  const SuiteOptions o;
  const auto all = SuiteGenerator(o).generate(1, 400);
  std::set<std::string> presets, mixes;
  std::set<Sharing> sharing;
  std::set<LadderShape> ladders;
  std::set<double> slo_shares;
  int mixed_profiles = 0, homogeneous = 0, big = 0, small = 0, oracle = 0;
  double min_ls = 1e9, max_ls = 0;
  for (const auto& p : all) {
    EXPECT_GE(p.pods, o.min_pods);
    EXPECT_LE(p.pods, o.max_pods);
    EXPECT_GE(p.mid, 0);
    EXPECT_GE(p.slow, 0);
    EXPECT_LE(p.mid + p.slow, o.max_slow_share * p.pods + 0.5) << p.describe();
    EXPECT_GE(p.length_scale, o.min_length_scale);
    EXPECT_LE(p.length_scale, o.max_length_scale);
    min_ls = std::min(min_ls, p.length_scale);
    max_ls = std::max(max_ls, p.length_scale);
    EXPECT_EQ(p.load.size(), static_cast<std::size_t>(o.stages));
    for (double f : p.load) {
      EXPECT_GE(f, 0.15);
      EXPECT_LE(f, 1.4);
    }
    if (p.ladder == LadderShape::kMonotone) {
      EXPECT_TRUE(std::is_sorted(p.load.begin(), p.load.end())) << p.describe();
    }
    if (p.ladder == LadderShape::kPlateau) {
      EXPECT_GE(p.load.back(), 1.1);
      EXPECT_EQ(p.load[1], p.load.back());
    }
    if (p.ladder == LadderShape::kBursty) {
      EXPECT_LT(p.load[0], 1.0);
      EXPECT_GE(p.load[1], 1.0);
    }
    EXPECT_TRUE(p.slo_share == 0 || p.slo_share == 0.5 || p.slo_share == 1) << p.slo_share;
    if (p.slo_share > 0) {
      EXPECT_GE(p.slo_ttft_x, 1.5);
      EXPECT_LE(p.slo_ttft_x, 4.0);
    } else {
      EXPECT_EQ(p.slo_ttft_x, 0);
    }
    if (!p.mix_preset.empty()) {
      EXPECT_NE(p.mix_preset, p.preset);
      EXPECT_GE(p.mix_share, 0.2);
      EXPECT_LE(p.mix_share, 0.5);
      mixes.insert(p.mix_preset);
    }
    EXPECT_EQ(p.oracle, p.pods <= o.oracle_max_pods && p.length_scale <= o.oracle_max_length_scale);
    presets.insert(p.preset);
    sharing.insert(p.sharing);
    ladders.insert(p.ladder);
    slo_shares.insert(p.slo_share);
    mixed_profiles += p.mid > 0 && p.slow > 0 ? 1 : 0;
    homogeneous += p.mid + p.slow == 0 ? 1 : 0;
    big += p.pods >= 50 ? 1 : 0;
    small += p.pods <= 4 ? 1 : 0;
    oracle += p.oracle ? 1 : 0;
  }
  EXPECT_EQ(presets.size(), workload::preset_names().size());
  EXPECT_EQ(mixes.size(), workload::preset_names().size());
  EXPECT_EQ(sharing.size(), 5u);
  EXPECT_EQ(ladders.size(), 4u);
  EXPECT_EQ(slo_shares.size(), 3u);
  EXPECT_GT(mixed_profiles, 20) << "pools with both slow profiles";
  EXPECT_GT(homogeneous, 80);
  EXPECT_GT(big, 20);
  EXPECT_GT(small, 20);
  EXPECT_GT(oracle, 20);
  EXPECT_LT(min_ls, 0.12);
  EXPECT_GT(max_ls, 0.85);
}

TEST(SuiteGenerator, QuickModeDrawsSmallerScenariosWithoutTheOracle) {
  const SuiteOptions q = SuiteOptions::quick();
  for (const auto& p : SuiteGenerator(q).generate(3, 100)) {
    EXPECT_LE(p.pods, q.max_pods);
    EXPECT_LE(p.length_scale, q.max_length_scale);
    EXPECT_FALSE(p.oracle);
  }
}

Summary stage(double ttft_p50, double success = 1.0) {
  Summary s;
  s.ttft.p50 = ttft_p50;
  s.ttft.p90 = 2 * ttft_p50;
  s.tpot.p90 = 9;
  s.success_rate = success;
  return s;
}

TEST(SuiteProbe, SaturationSitsBetweenTheLastCalmStageAndTheFirstQueuedOne) {
  SuiteParams p = SuiteGenerator().draw(1, 0);
  const SuiteOptions o;
  const Scenario probe = probe_scenario(p, o);
  ASSERT_EQ(probe.stages.size(), 12u);
  for (std::size_t i = 1; i < probe.stages.size(); ++i) {
    EXPECT_NEAR(probe.stages[i].rate / probe.stages[i - 1].rate, 1.6, 0.02);
  }
  ASSERT_EQ(probe.strategies, std::vector<Strategy>{Strategy::kRoundRobin});

  std::vector<Summary> sums = {stage(10), stage(11),  stage(14), stage(19),
                               stage(80), stage(400), stage(900)};
  ProbeResult r = read_probe(probe, sums);
  EXPECT_TRUE(r.saturated);
  EXPECT_NEAR(r.saturation_rps, std::sqrt(probe.stages[3].rate * probe.stages[4].rate),
              0.01 * r.saturation_rps);
  EXPECT_EQ(r.base_ttft_p90_ms, 20);
  EXPECT_EQ(r.base_tpot_p90_ms, 9);

  sums[2].success_rate = 0.9;  // failed requests count as saturation too
  EXPECT_LT(read_probe(probe, sums).saturation_rps, r.saturation_rps);

  std::vector<Summary> calm(12, stage(10));
  ProbeResult never = read_probe(probe, calm);
  EXPECT_FALSE(never.saturated);
  EXPECT_NEAR(never.saturation_rps, 1.3 * probe.stages.back().rate, 0.01 * never.saturation_rps);

  // The scenario's stages are the drawn multiples of that rate; SLOs scale the probe's p90s.
  p.slo_share = 0.5;
  p.slo_ttft_x = 2;
  p.slo_tpot_x = 1.5;
  const Scenario s = suite_scenario(p, r, o);
  ASSERT_EQ(s.stages.size(), p.load.size());
  for (std::size_t i = 0; i < s.stages.size(); ++i) {
    EXPECT_NEAR(s.stages[i].rate, p.load[i] * r.saturation_rps, 0.01 * s.stages[i].rate);
  }
  EXPECT_EQ(s.saturation_rps, r.saturation_rps);
  EXPECT_EQ(s.slo_ttft_ms, 40);
  EXPECT_NEAR(*s.slo_tpot_ms, 13.5, 0.05);
  EXPECT_EQ(s.slo_share, 0.5);
  EXPECT_EQ(s.pool.num_pods, p.pods);
  EXPECT_EQ(s.pool.num_mid + s.pool.num_slow, p.mid + p.slow);
}

TEST(SuiteProbe, TheLadderGrowsOneStageAtATimeAndStopsAtTheFirstSaturatedStage) {
  const SuiteParams p = SuiteGenerator().draw(2, 5);
  std::vector<std::size_t> lengths;
  const ProbeResult r = probe_saturation(p, SuiteOptions{}, [&](const Scenario& s) {
    lengths.push_back(s.stages.size());
    std::vector<Summary> sums;
    for (std::size_t i = 0; i < s.stages.size(); ++i) {
      sums.push_back(stage(i < 4 ? 10.0 : 100.0));  // stage 4 (0-based) queues
    }
    return sums;
  });
  EXPECT_EQ(lengths, (std::vector<std::size_t>{2, 3, 4, 5}));
  const Scenario full = probe_scenario(p, SuiteOptions{});
  EXPECT_NEAR(r.saturation_rps, std::sqrt(full.stages[3].rate * full.stages[4].rate),
              0.01 * r.saturation_rps);
}

TEST(SuiteGenerator, StagesAreCappedByWorkAndPodTimeNotByRequestsAlone) {
  SuiteOptions o;
  o.max_requests = 25000;
  o.max_work = 15000;
  o.max_pod_seconds = 3000;
  o.min_retrains_per_stage = 2;
  SuiteParams p;
  p.pods = 10;
  p.load = std::vector<double>(6, 1.0);
  p.length_scale = 0.1;
  // Short requests on a small pool: the request and work caps agree (15000 / 1000 req/s).
  EXPECT_DOUBLE_EQ(capped_stage_seconds(p, o, 20, 1000, 6, 1), 15);
  // Ten times longer requests: a tenth of the requests, but never under two retrains (2 s).
  p.length_scale = 1.0;
  EXPECT_DOUBLE_EQ(capped_stage_seconds(p, o, 50, 100, 6, 1), 20);
  EXPECT_DOUBLE_EQ(capped_stage_seconds(p, o, 50, 1, 6, 1), 50);  // nothing binds
  // A large pool: pod-time binds (3000 / (100 x 6) = 5 s, raised to the 20-s floor).
  p.pods = 100;
  EXPECT_DOUBLE_EQ(capped_stage_seconds(p, o, 50, 1, 6, 1), 20);
  p.length_scale = 0.1;
  EXPECT_DOUBLE_EQ(capped_stage_seconds(p, o, 5, 1, 6, 1), 5);
  p.pods = 200;
  EXPECT_DOUBLE_EQ(capped_stage_seconds(p, o, 5, 1, 6, 1), 2.5);
  // The probe gets a third of each cap; quick mode has only the request cap.
  EXPECT_DOUBLE_EQ(capped_stage_seconds(p, o, 5, 1, 6, 1.0 / 3), 2);
  const SuiteOptions q = SuiteOptions::quick();
  EXPECT_DOUBLE_EQ(capped_stage_seconds(p, q, 3, 1000, 6, 1), 3);
  EXPECT_DOUBLE_EQ(capped_stage_seconds(p, q, 3, 4000, 6, 1), 2);
}

TEST(SuiteQuantile, InterpolatesAndSkipsNaN) {
  EXPECT_DOUBLE_EQ(quantile({3, 1, 2, kNaN}, 0.5), 2);
  EXPECT_DOUBLE_EQ(quantile({0, 10}, 0.1), 1);
  EXPECT_TRUE(std::isnan(quantile({}, 0.5)));
}

// A mixture and a share of SLO headers reach the trace: both workloads' requests (with their
// own system prompts), and about half of the requests carry the headers.
TEST(SuiteTrace, MixturesAndSloSharesReachTheTrace) {
  Scenario s;
  s.preset = "C";
  s.mix_preset = "sharegpt";
  s.mix_share = 0.3;
  s.length_scale = 0.1;
  s.slo_ttft_ms = 100;
  s.slo_share = 0.5;
  s.stages = {{200, 5}};
  const auto t = make_trace(s);
  ASSERT_TRUE(t.mix_spec);
  int mixed = 0, with_slo = 0;
  for (const auto& r : t.requests) {
    mixed += r.group >= t.spec.num_groups ? 1 : 0;
    with_slo += r.headers.empty() ? 0 : 1;
  }
  const double n = static_cast<double>(t.requests.size());
  EXPECT_NEAR(mixed / n, 0.3, 0.05);
  EXPECT_NEAR(with_slo / n, 0.5, 0.05);
  EXPECT_FALSE(t.system_prompt(0).empty());
  EXPECT_TRUE(t.system_prompt(t.spec.num_groups).empty()) << "sharegpt has no system prompt";

  // Without a mix or a share the trace is the one it always was.
  Scenario plain = s;
  plain.mix_preset.clear();
  plain.slo_share = 1;
  Scenario again = plain;
  again.mix_share = 0;
  const auto a = make_trace(plain), b = make_trace(again);
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (const auto& r : a.requests) {
    EXPECT_EQ(r.headers.size(), 1u);
  }
}

}  // namespace
}  // namespace llmd::cluster

namespace llmd::cluster {
namespace {

TEST(SuiteRetrains, EveryStageSeesAtLeastTwoRetrainsInEveryModeHoweverShortTheCapsMakeIt) {
  for (const SuiteOptions& o : {SuiteOptions{}, SuiteOptions::quick()}) {
    int shortened = 0;
    for (const auto& p : SuiteGenerator(o).generate(1, 100)) {
      ProbeResult probe;
      // A high-rate pool: the request cap shortens its stages to the 0.5-s floor.
      probe.saturation_rps = 400.0 * p.pods;
      const Scenario s = suite_scenario(p, probe, o);
      const double stage_ms = 1000 * s.stages.front().duration_s;
      const double retrain_ms = retrain_interval_ms(s, TimeBase{});
      EXPECT_LE(2 * retrain_ms, stage_ms * (1 + 1e-9)) << p.describe();
      shortened += retrain_ms < TimeBase{}.retrain_real_s * 1000 * p.length_scale ? 1 : 0;
    }
    EXPECT_GT(shortened, 0) << "some stages are capped below two scaled retrain intervals";
  }
}

}  // namespace
}  // namespace llmd::cluster
