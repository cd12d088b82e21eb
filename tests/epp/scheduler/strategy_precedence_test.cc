// Strategy selection of seed 001: header x-prediction-based-scheduling > config parameter
// headroomSelectionStrategy > env HEADROOM_SELECTION_STRATEGY > least; composite-only runs
// requests without asking the predictor at all.
#include <gtest/gtest.h>

#include "epp/plugins/register.h"
#include "epp/plugins/scorer/latency/latency_scorer.h"
#include "epp/scheduler/config_loader.h"
#include "epp/scheduler/scheduling_cycle.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

using testing::FixedRng;
using testing::pod;

std::string pipeline_yaml(const std::string& strategy_param) {
  std::string params = strategy_param.empty()
                           ? ""
                           : "\n  parameters: {headroomSelectionStrategy: " + strategy_param + "}";
  return "plugins:\n- type: predicted-latency-producer\n- type: latency-scorer" + params +
         "\n- type: weighted-random-picker\nschedulingProfiles:\n- name: default\n  plugins:\n"
         "  - pluginRef: latency-scorer\n  - pluginRef: weighted-random-picker\n";
}

struct Loaded {
  PipelineConstPtr pipeline;
  LatencyScorer::Strategy strategy;
};

Loaded load(testing::TestServices& s, const std::string& param) {
  PluginRegistry r;
  register_builtin_plugins(r);
  LoadResult l = load_pipeline(pipeline_yaml(param), r, s.handle());
  EXPECT_TRUE(l.ok()) << l.error;
  auto scorer =
      std::dynamic_pointer_cast<const LatencyScorer>(l.pipeline->plugin("latency-scorer"));
  return {l.pipeline, scorer->strategy()};
}

TEST(StrategyPrecedence, ConfigBeatsEnvBeatsDefault) {
  testing::TestServices s;
  EXPECT_EQ(load(s, "").strategy, LatencyScorer::Strategy::kLeast);
  s.env["HEADROOM_SELECTION_STRATEGY"] = "most";
  EXPECT_EQ(load(s, "").strategy, LatencyScorer::Strategy::kMost);
  EXPECT_EQ(load(s, "least").strategy, LatencyScorer::Strategy::kLeast);
  EXPECT_EQ(load(s, "composite-most").strategy, LatencyScorer::Strategy::kCompositeMost);
}

TEST(StrategyPrecedence, CompositeOnlyNeverAsksThePredictor) {
  testing::TestServices s;
  s.env["HEADROOM_SELECTION_STRATEGY"] = "composite-only";
  Loaded l = load(s, "");
  EXPECT_TRUE(l.pipeline->predictions_ignored);
  SchedulingCycle d(l.pipeline);
  FixedRng rng;
  auto r = d.schedule(testing::request(), {pod("a", 0.9), pod("b", 0.1)}, rng);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(s.source.calls, 0);
  EXPECT_FALSE(r.predictions_used);
  // Composite scoring still ranks the pods: b has the emptier KV cache.
  ASSERT_EQ(r.scores.size(), 2u);
  EXPECT_GT(r.scores[1].score, r.scores[0].score);
}

TEST(StrategyPrecedence, ConfigParameterOverridesCompositeOnlyEnv) {
  testing::TestServices s;
  s.env["HEADROOM_SELECTION_STRATEGY"] = "composite-only";
  Loaded l = load(s, "least");
  EXPECT_FALSE(l.pipeline->predictions_ignored);
  SchedulingCycle d(l.pipeline);
  FixedRng rng;
  auto r = d.schedule(testing::request(), {pod("a"), pod("b")}, rng);
  EXPECT_EQ(s.source.calls, 1);
  EXPECT_TRUE(r.predictions_used);
}

TEST(StrategyPrecedence, HeaderFalseBeatsConfig) {
  testing::TestServices s;
  Loaded l = load(s, "least");
  SchedulingCycle d(l.pipeline);
  FixedRng rng;
  auto req = testing::request();
  req.prediction_enabled = false;  // x-prediction-based-scheduling: false
  auto r = d.schedule(req, {pod("a"), pod("b")}, rng);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(s.source.calls, 0);
  EXPECT_FALSE(r.predictions_used);
  req.prediction_enabled = true;  // true (or absent) = the configured default
  r = d.schedule(req, {pod("a"), pod("b")}, rng);
  EXPECT_EQ(s.source.calls, 1);
  EXPECT_TRUE(r.predictions_used);
}

}  // namespace
}  // namespace llmd::epp
