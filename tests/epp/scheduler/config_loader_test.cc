#include "epp/scheduler/config_loader.h"

#include <gtest/gtest.h>

#include "epp/plugins/filter/prefix_cache_affinity/prefix_cache_affinity_filter.h"
#include "epp/plugins/picker/near_best_rotation/near_best_rotation_picker.h"
#include "epp/plugins/picker/weighted_random/weighted_random_picker.h"
#include "epp/plugins/producer/predicted_latency/predicted_latency_producer.h"
#include "epp/plugins/register.h"
#include "epp/plugins/scorer/latency/latency_scorer.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

class ConfigLoaderTest : public ::testing::Test {
 protected:
  ConfigLoaderTest() { register_builtin_plugins(registry_); }
  LoadResult load(const std::string& yaml) {
    return load_pipeline(yaml, registry_, services_.handle());
  }
  void expect_error(const std::string& yaml, const std::string& fragment) {
    auto r = load(yaml);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error.find(fragment), std::string::npos) << "error was: " << r.error;
  }
  PluginRegistry registry_;
  testing::TestServices services_;
};

TEST_F(ConfigLoaderTest, LoadsTheShippedConfigurations) {
  for (const char* file : {"default-pipeline.yaml", "load-prefix.yaml", "round-robin.yaml"}) {
    auto r = load_pipeline_file(std::string(LLMD_SOURCE_DIR) + "/epp/config/" + file, registry_,
                                services_.handle());
    ASSERT_TRUE(r.ok()) << file << ": " << r.error;
    EXPECT_EQ(r.pipeline->profiles.size(), 1u) << file;
  }
}

// Both predicted-latency pipelines have the contract's shape; they differ in the constants the
// routing benchmark measured (default) or upstream ships (upstream), and in the SLO-headroom
// tier filter between the affinity gates (upstream only: the default splits by headroom in the
// latency scorer, after affinity).
void expect_contract_shape(const Pipeline& p, double loose_threshold, bool prefer_idle,
                           LatencyScorer::Strategy strategy, bool headroom_tier_filter) {
  ASSERT_EQ(p.producers.size(), 2u);
  EXPECT_EQ(p.producers[0].plugin->type(), "approx-prefix-cache-producer");
  EXPECT_EQ(p.producers[1].plugin->type(), "predicted-latency-producer");
  ASSERT_EQ(p.admitters.size(), 1u);
  EXPECT_EQ(p.admitters[0].plugin->type(), "latency-slo-admitter");
  const Profile& prof = p.profiles[0];
  ASSERT_EQ(prof.filters().size(), headroom_tier_filter ? 3u : 2u);
  using Affinity = PrefixCacheAffinityFilter;
  auto strict = std::dynamic_pointer_cast<const Affinity>(prof.filters()[0].plugin);
  auto loose = std::dynamic_pointer_cast<const Affinity>(prof.filters().back().plugin);
  ASSERT_TRUE(strict && loose);
  EXPECT_DOUBLE_EQ(strict->config().threshold, 0.99);
  EXPECT_DOUBLE_EQ(loose->config().threshold, loose_threshold);
  if (headroom_tier_filter) {
    EXPECT_EQ(prof.filters()[1].plugin->type(), "slo-headroom-tier-filter");
  }
  ASSERT_EQ(prof.scorers().size(), 1u);
  auto scorer = std::dynamic_pointer_cast<const LatencyScorer>(prof.scorers()[0].plugin);
  ASSERT_TRUE(scorer);
  EXPECT_EQ(scorer->config().preferIdlePods, prefer_idle);
  EXPECT_EQ(scorer->strategy(), strategy);
}

TEST_F(ConfigLoaderTest, DefaultAndUpstreamPipelinesHaveTheContractShape) {
  auto d = load_pipeline_file(std::string(LLMD_SOURCE_DIR) + "/epp/config/default-pipeline.yaml",
                              registry_, services_.handle());
  ASSERT_TRUE(d.ok()) << d.error;
  expect_contract_shape(*d.pipeline, 0.70, false, LatencyScorer::Strategy::kLatencyComposite,
                        false);
  auto producer =
      std::dynamic_pointer_cast<const PredictedLatencyProducer>(d.pipeline->producers[1].plugin);
  ASSERT_TRUE(producer);
  EXPECT_TRUE(producer->config().sloBoundCalibration);
  EXPECT_TRUE(producer->config().podResidualCorrection);
  EXPECT_TRUE(producer->config().stepPhaseCorrection);
  // Requests some pod has cached are drawn ~ score^100; the others, with SLO headers or
  // without, rotate over the pods predicted within 5 % of the fastest.
  auto rotation = std::dynamic_pointer_cast<const NearBestRotationPicker>(
      d.pipeline->profiles[0].picker().plugin);
  ASSERT_TRUE(rotation);
  EXPECT_DOUBLE_EQ(rotation->config().cachedRequestExponent, 100);
  EXPECT_DOUBLE_EQ(rotation->config().uncachedSloRequestExponent, 0);
  EXPECT_TRUE(rotation->config().rotateSloRequests);
  EXPECT_DOUBLE_EQ(rotation->config().tolerance, 0.05);
  EXPECT_EQ(rotation->config().nearBestBy, "predictedTTFT");
  auto strict = std::dynamic_pointer_cast<const PrefixCacheAffinityFilter>(
      d.pipeline->profiles[0].filters()[0].plugin);
  // The gates are broken by a queue on every sticky pod (and none elsewhere), not by a
  // predicted penalty: the model does not see a pod's slot limit.
  EXPECT_DOUBLE_EQ(strict->config().maxTTFTPenaltyMs, 0);
  EXPECT_TRUE(strict->config().queueEscape);
  auto loose = std::dynamic_pointer_cast<const PrefixCacheAffinityFilter>(
      d.pipeline->profiles[0].filters()[1].plugin);
  ASSERT_TRUE(loose);
  EXPECT_DOUBLE_EQ(loose->config().threshold, 0.70);
  EXPECT_TRUE(loose->config().queueEscape);
  auto scorer =
      std::dynamic_pointer_cast<const LatencyScorer>(d.pipeline->profiles[0].scorers()[0].plugin);
  EXPECT_EQ(scorer->config().sloMissStrategy, "latency-composite");
  EXPECT_EQ(scorer->config().indistinctPredictions, "prefill-work");
  EXPECT_FALSE(scorer->config().preferIdlePods);
  EXPECT_DOUBLE_EQ(scorer->config().compositePrefixWeight, 3);
  EXPECT_DOUBLE_EQ(scorer->config().compositeQueueWeight, 2);
  EXPECT_DOUBLE_EQ(scorer->config().compositeKvWeight, 2);
  auto u = load_pipeline_file(std::string(LLMD_SOURCE_DIR) + "/epp/config/upstream-pipeline.yaml",
                              registry_, services_.handle());
  ASSERT_TRUE(u.ok()) << u.error;
  expect_contract_shape(*u.pipeline, 0.80, true, LatencyScorer::Strategy::kLeast, true);
  auto weighted = std::dynamic_pointer_cast<const WeightedRandomPicker>(
      u.pipeline->profiles[0].picker().plugin);
  ASSERT_TRUE(weighted);
  EXPECT_DOUBLE_EQ(weighted->config().scoreExponent, 1);
  // Our defaults that upstream does not have are switched off in the upstream pipeline.
  auto up_producer =
      std::dynamic_pointer_cast<const PredictedLatencyProducer>(u.pipeline->producers[1].plugin);
  ASSERT_TRUE(up_producer);
  EXPECT_FALSE(up_producer->config().podResidualCorrection);
  EXPECT_FALSE(up_producer->config().stepPhaseCorrection);
  EXPECT_FALSE(up_producer->config().sloBoundCalibration);
  for (const auto& f : u.pipeline->profiles[0].filters()) {
    if (auto gate = std::dynamic_pointer_cast<const PrefixCacheAffinityFilter>(f.plugin)) {
      EXPECT_FALSE(gate->config().queueEscape);
      EXPECT_DOUBLE_EQ(gate->config().maxTTFTPenaltyMs, 5000);
    }
  }
}

TEST_F(ConfigLoaderTest, PartialParametersKeepOtherDefaults) {
  auto r = load(R"(
plugins:
- type: prefix-cache-affinity-filter
  name: strict
  parameters:
    threshold: 0.99
- type: latency-scorer
  parameters: {ttftWeight: 2}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: strict}, {pluginRef: latency-scorer, weight: 3}]
)");
  ASSERT_TRUE(r.ok()) << r.error;
  auto f = std::dynamic_pointer_cast<const PrefixCacheAffinityFilter>(r.pipeline->plugin("strict"));
  ASSERT_TRUE(f);
  EXPECT_DOUBLE_EQ(f->config().threshold, 0.99);
  EXPECT_DOUBLE_EQ(f->config().explorationProbability, 0.01);
  EXPECT_DOUBLE_EQ(f->config().maxTTFTPenaltyMs, 0);
  auto s = std::dynamic_pointer_cast<const LatencyScorer>(r.pipeline->plugin("latency-scorer"));
  ASSERT_TRUE(s);
  EXPECT_DOUBLE_EQ(s->config().ttftWeight, 2);
  EXPECT_DOUBLE_EQ(s->config().tpotWeight, 0.2);
  EXPECT_DOUBLE_EQ(r.pipeline->profiles[0].scorers()[0].weight, 3);
  // No picker listed: llm-d's default max-score picker is added.
  EXPECT_EQ(r.pipeline->profiles[0].picker().plugin->type(), "max-score-picker");
  // latency-scorer reads prefix info nobody writes: the default producer is added.
  ASSERT_EQ(r.pipeline->producers.size(), 1u);
  EXPECT_EQ(r.pipeline->producers[0].plugin->type(), "approx-prefix-cache-producer");
}

TEST_F(ConfigLoaderTest, UnknownTypeNamesPluginAndType) {
  expect_error(R"(
plugins: [{type: fancy-scorer, name: f}]
schedulingProfiles: [{name: d, plugins: [{pluginRef: f}]}]
)",
               "plugin 'f' (type fancy-scorer): unknown plugin type");
}

TEST_F(ConfigLoaderTest, UnknownOrBadParameterNamesPluginAndType) {
  expect_error(R"(
plugins: [{type: slo-headroom-tier-filter, name: tier, parameters: {epsilon: 0.1}}]
schedulingProfiles: [{name: d, plugins: [{pluginRef: tier}]}]
)",
               "plugin 'tier' (type slo-headroom-tier-filter): unknown parameter 'epsilon'");
  expect_error(R"(
plugins: [{type: slo-headroom-tier-filter, name: tier, parameters: {epsilonExploreNeg: 2}}]
schedulingProfiles: [{name: d, plugins: [{pluginRef: tier}]}]
)",
               "plugin 'tier' (type slo-headroom-tier-filter): parameter 'epsilonExploreNeg' "
               "must be in [0, 1], got 2");
  // Quoted scalars stay strings: a number in quotes is a type error.
  expect_error(R"(
plugins: [{type: slo-headroom-tier-filter, name: tier, parameters: {epsilonExploreNeg: "0.1"}}]
schedulingProfiles: [{name: d, plugins: [{pluginRef: tier}]}]
)",
               "must be a number");
}

TEST_F(ConfigLoaderTest, StructuralErrors) {
  expect_error("plugins: []\n", "schedulingProfiles");
  expect_error("plugins: []\nschedulingProfiles: [{name: d}]\nextra: 1\n", "unknown key 'extra'");
  expect_error(R"(
plugins: [{type: queue-scorer, params: {}}]
schedulingProfiles: [{name: d}]
)",
               "plugin 'queue-scorer' (type queue-scorer): unknown key 'params'");
  expect_error(R"(
plugins: [{type: queue-scorer}, {type: queue-scorer}]
schedulingProfiles: [{name: d}]
)",
               "is used by another plugin");
  expect_error(R"(
plugins: [{type: queue-scorer}]
schedulingProfiles: [{name: d, plugins: [{pluginRef: nope}]}]
)",
               "pluginRef 'nope' names no plugin");
  expect_error(R"(
plugins: [{type: max-score-picker, name: a}, {type: round-robin-picker, name: b}]
schedulingProfiles: [{name: d, plugins: [{pluginRef: a}, {pluginRef: b}]}]
)",
               "already has picker 'a'");
  expect_error(R"(
plugins: [{type: max-score-picker, name: a}]
schedulingProfiles: [{name: d, plugins: [{pluginRef: a, weight: 2}]}]
)",
               "plugin 'a' (type max-score-picker) is not a scorer and takes no weight");
  expect_error(R"(
plugins: [{type: metrics-data-source, name: src}]
schedulingProfiles: [{name: d, plugins: [{pluginRef: src}]}]
)",
               "plugin 'src' (type metrics-data-source) is not a filter, scorer, picker, "
               "producer or admitter");
  expect_error(R"(
plugins: [{type: queue-scorer}]
schedulingProfiles: [{name: d, plugins: [{pluginRef: queue-scorer, weight: -1}]}]
)",
               "must be a number >= 0");
  expect_error("plugins: [\n", "invalid YAML");
}

TEST_F(ConfigLoaderTest, ProducerOrderIsChecked) {
  expect_error(R"(
plugins:
- type: predicted-latency-producer
- type: approx-prefix-cache-producer
schedulingProfiles: [{name: d}]
)",
               "plugin 'predicted-latency-producer' (type predicted-latency-producer) reads "
               "prefix-cache match info written by plugin 'approx-prefix-cache-producer'");
}

TEST_F(ConfigLoaderTest, AliasAndLlmdHeaderAreAccepted) {
  auto r = load(R"(
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: kv-cache-utilization-scorer
  name: kv
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: kv
    weight: 2
)");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.pipeline->plugin("kv")->type(), "kv-cache-scorer");
}

}  // namespace
}  // namespace llmd::epp
