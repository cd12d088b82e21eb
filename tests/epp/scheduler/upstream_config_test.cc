// Upstream's EndpointPickerConfig through the real loader: the GIE v1.5.0 and llm-d-router
// charts' rendered configs (tests/fixtures/upstream/configs/), and each top-level key, plugin
// type and profile rule they may carry, mapped or refused by name.
#include <gtest/gtest.h>

#include "epp/plugins/filter/prefix_cache_affinity/prefix_cache_affinity_filter.h"
#include "epp/plugins/producer/predicted_latency/predicted_latency_producer.h"
#include "epp/plugins/register.h"
#include "epp/scheduler/config_loader.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

const std::string kFixtures = std::string(LLMD_SOURCE_DIR) + "/tests/fixtures/upstream/configs/";

class UpstreamConfig : public ::testing::Test {
 protected:
  UpstreamConfig() { register_builtin_plugins(registry_); }
  LoadResult load(const std::string& yaml) {
    return load_pipeline(yaml, registry_, services_.handle());
  }
  LoadResult file(const std::string& name) {
    return load_pipeline_file(kFixtures + name, registry_, services_.handle());
  }
  // A small pipeline with `plugins` added to its plugin list and `top` (top-level keys) after.
  static std::string doc(const std::string& plugins, const std::string& top = "") {
    return "plugins:\n- type: latency-scorer\n" + plugins +
           "schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: latency-scorer}]\n" + top;
  }
  void expect_error(const std::string& yaml, const std::vector<std::string>& fragments) {
    auto r = load(yaml);
    ASSERT_FALSE(r.ok()) << yaml;
    for (const auto& f : fragments) {
      EXPECT_NE(r.error.find(f), std::string::npos) << "'" << f << "' not in: " << r.error;
    }
  }
  ScrapeConfig scrape(const std::string& yaml) {
    auto r = load(yaml);
    EXPECT_TRUE(r.ok()) << r.error;
    return r.settings.scrape;
  }
  PluginRegistry registry_;
  testing::TestServices services_;
};

// The chart's predicted-latency pipeline: producers (the prefix producer added for its
// readers), the admitter, and the profile strict -> tier -> loose -> latency-scorer -> picker.
void expect_chart_pipeline(const LoadResult& r) {
  ASSERT_TRUE(r.ok()) << r.error;
  const Pipeline& p = *r.pipeline;
  ASSERT_EQ(p.producers.size(), 2u);
  EXPECT_EQ(p.producers[0].plugin->type(), "approx-prefix-cache-producer");
  EXPECT_EQ(p.producers[1].plugin->name(), "predicted-latency-producer");
  ASSERT_EQ(p.admitters.size(), 1u);
  EXPECT_EQ(p.admitters[0].plugin->type(), "latency-slo-admitter");
  ASSERT_EQ(p.profiles.size(), 1u);
  const Profile& prof = p.profiles[0];
  EXPECT_EQ(prof.name(), "default");
  ASSERT_EQ(prof.filters().size(), 3u);
  EXPECT_EQ(prof.filters()[0].plugin->name(), "strict-affinity-filter");
  EXPECT_EQ(prof.filters()[1].plugin->type(), "slo-headroom-tier-filter");
  EXPECT_EQ(prof.filters()[2].plugin->name(), "loose-affinity-filter");
  using Affinity = PrefixCacheAffinityFilter;
  EXPECT_DOUBLE_EQ(
      std::dynamic_pointer_cast<const Affinity>(prof.filters()[0].plugin)->config().threshold,
      0.99);
  EXPECT_DOUBLE_EQ(
      std::dynamic_pointer_cast<const Affinity>(prof.filters()[2].plugin)->config().threshold,
      0.80);
  ASSERT_EQ(prof.scorers().size(), 1u);
  EXPECT_EQ(prof.scorers()[0].plugin->type(), "latency-scorer");
  EXPECT_DOUBLE_EQ(prof.scorers()[0].weight, 1);
  EXPECT_EQ(prof.picker().plugin->type(), "weighted-random-picker");
  // The data layer: vLLM's gauges at http://<pod>/metrics, as the EPP always scraped.
  EXPECT_EQ(r.settings.scrape, ScrapeConfig{});
  EXPECT_EQ(r.settings.endpoint_role_label, "role");
}

TEST_F(UpstreamConfig, TheGieChartConfigLoadsAsItIs) {
  expect_chart_pipeline(file("gie-v1.5.0-inferencepool-latency-predictor.yaml"));
}

TEST_F(UpstreamConfig, TheLlmdChartConfigLoadsAsItIs) {
  const auto r = file("llm-d-router-routerlib-latency-predictor.yaml");
  expect_chart_pipeline(r);
  ASSERT_TRUE(r.ok());
  for (std::size_t i : {0u, 2u}) {
    auto f = std::dynamic_pointer_cast<const PrefixCacheAffinityFilter>(
        r.pipeline->profiles[0].filters()[i].plugin);
    EXPECT_EQ(f->config().ttftSource, "latencyPredictor");
    EXPECT_DOUBLE_EQ(f->config().maxTTFTPenaltyMs, 5000);
  }
}

TEST_F(UpstreamConfig, TheChartsDefaultEngineParameterPicksTheEnginesGauges) {
  for (const char* engine : {"sglang", "triton-tensorrt-llm", "trtllm-serve"}) {
    const auto s =
        scrape(doc("- type: metrics-data-source\n- type: core-metrics-extractor\n"
                   "  parameters:\n    defaultEngine: \"" +
                   std::string(engine) + "\"\n"));
    EXPECT_EQ(s.default_engine, engine);
    EXPECT_EQ(s.mapping_for({})->engine, engine);
  }
}

TEST_F(UpstreamConfig, ApiVersionAndKindAreValidated) {
  EXPECT_TRUE(load("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n" + doc("")).ok());
  EXPECT_TRUE(load("apiVersion: inference.networking.x-k8s.io/v1alpha1\n"
                   "kind: EndpointPickerConfig\n" +
                   doc(""))
                  .ok());
  expect_error("apiVersion: inference.networking.k8s.io/v1\nkind: EndpointPickerConfig\n" + doc(""),
               {"apiVersion", "inference.networking.k8s.io/v1", "not supported"});
  expect_error("apiVersion: llm-d.ai/v1alpha1\nkind: InferencePool\n" + doc(""),
               {"kind", "InferencePool", "EndpointPickerConfig"});
  expect_error("apiVersion: llm-d.ai/v1alpha1\n" + doc(""), {"apiVersion and kind"});
}

TEST_F(UpstreamConfig, UnknownTopLevelKeysAndTheEppFilesKeysInAPipelineFileAreRefused) {
  expect_error(doc("", "data: {sources: []}\n"), {"unknown key 'data'", "dataLayer"});
  expect_error(doc("", "pool: {pods: []}\n"), {"unknown key 'pool'"});
  EXPECT_TRUE(load_pipeline(doc("", "scrapeIntervalMs: 50\n"), registry_, services_.handle(),
                            nullptr, Document::kEppFile)
                  .ok())
      << "inline in the EPP config file its own keys sit beside the pipeline's";
}

TEST_F(UpstreamConfig, FeatureGates) {
  EXPECT_TRUE(load(doc("", "featureGates: [dataLayer]\n")).ok()) << "GIE: a deprecated no-op";
  EXPECT_TRUE(load(doc("", "featureGates: [haPopulateNonLeaderDatastore]\n")).ok());
  EXPECT_TRUE(load(doc("", "featureGates: [\"flowControl=false\"]\n")).ok());
  expect_error(doc("", "featureGates: [flowControl]\n"),
               {"featureGates: flowControl is not supported", "routerQueue"});
  expect_error(doc("", "featureGates: [\"haPopulateNonLeaderDatastore=false\"]\n"),
               {"haPopulateNonLeaderDatastore=false", "standby"});
  expect_error(doc("", "featureGates: [experimentalThing]\n"),
               {"unknown gate 'experimentalThing'"});
  expect_error(doc("", "featureGates: [\"flowControl=maybe\"]\n"), {"true or false"});
  expect_error(doc("", "featureGates: flowControl\n"), {"featureGates must be a list"});
}

TEST_F(UpstreamConfig, TheLegacyMetricsGateScrapesWithTheLegacyDefaults) {
  const auto s =
      scrape(doc("- type: core-metrics-extractor\n"
                 "  parameters: {defaultEngine: sglang}\n",
                 "featureGates: [enableLegacyMetrics]\n"));
  EXPECT_EQ(s, ScrapeConfig{}) << "vLLM at http /metrics, the legacy flags' defaults";
}

TEST_F(UpstreamConfig, TheParserMustBeTheOpenAiParser) {
  EXPECT_TRUE(load(doc("- type: openai-parser\n", "parser: {pluginRef: openai-parser}\n")).ok());
  EXPECT_TRUE(load(doc("", "parser: {pluginRef: openai-parser}\n")).ok())
      << "upstream makes the default parser when it is not listed";
  EXPECT_TRUE(load(doc("- name: p\n  type: openai-parser\n", "parser: {pluginRef: p}\n")).ok());
  expect_error(doc("- type: vllmgrpc-parser\n", "parser: {pluginRef: vllmgrpc-parser}\n"),
               {"type vllmgrpc-parser", "not supported", "gRPC"});
  expect_error(doc("- type: passthrough-parser\n"), {"type passthrough-parser", "OpenAI JSON"});
  expect_error(doc("", "parser: {pluginRef: latency-scorer}\n"),
               {"'latency-scorer' is not a parser"});
  expect_error(doc("", "parser: {pluginRef: mine}\n"),
               {"parser: pluginRef 'mine' names no plugin"});
  expect_error(doc("", "parser: {plugin: openai-parser}\n"), {"parser: unknown key 'plugin'"});
}

TEST_F(UpstreamConfig, RequestHandlerParsers) {
  EXPECT_TRUE(load(doc("- type: openai-parser\n",
                       "requestHandler:\n  parsers: [{pluginRef: openai-parser}]\n"))
                  .ok());
  expect_error(doc("- type: anthropic-parser\n",
                   "requestHandler:\n  parsers: [{pluginRef: anthropic-parser}]\n"),
               {"type anthropic-parser", "not supported"});
  expect_error(doc("", "requestHandler:\n  parsers: [{pluginRef: latency-scorer}]\n"),
               {"requestHandler.parsers[0]", "not a parser"});
  expect_error(doc("", "requestHandler: {routes: []}\n"), {"requestHandler: unknown key 'routes'"});
}

TEST_F(UpstreamConfig, SaturationDetectorAndFlowControlAreRefusedWithWhy) {
  expect_error(doc("", "saturationDetector: {pluginRef: utilization-detector}\n"),
               {"saturationDetector is not supported", "latency-slo-admitter", "routerQueue"});
  expect_error(doc("", "flowControl: {maxRequests: 100}\n"),
               {"flowControl is not supported", "routerQueue"});
  expect_error(doc("- type: utilization-detector\n"),
               {"type utilization-detector", "not supported", "saturation detector"});
  expect_error(doc("- type: fcfs-ordering-policy\n"),
               {"type fcfs-ordering-policy", "flow-control"});
}

TEST_F(UpstreamConfig, DataLayerSections) {
  const std::string plugins =
      "- name: src\n  type: metrics-data-source\n  parameters: {path: /prometheus/metrics}\n"
      "- name: x\n  type: core-metrics-extractor\n  parameters: {defaultEngine: trtllm-serve}\n";
  const auto s = scrape(doc(plugins,
                            "dataLayer:\n  sources:\n  - pluginRef: src\n"
                            "    extractors: [{pluginRef: x}]\n"));
  EXPECT_EQ(s.path, "/prometheus/metrics");
  EXPECT_EQ(s.default_engine, "trtllm-serve");
  // Without a section upstream reads the plugins named after their types: these are unused.
  EXPECT_EQ(scrape(doc(plugins)), ScrapeConfig{});
  expect_error(doc(plugins, "dataLayer: {sources: []}\n"), {"dataLayer: no sources", "needs"});
  EXPECT_EQ(scrape("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n" +
                   doc("", "dataLayer: {}\n")),
            ScrapeConfig{})
      << "llm-d injects the default source into an empty section";
  expect_error("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n" +
                   doc("", "dataLayer: {injectDefaults: false}\n"),
               {"dataLayer: no sources"});
  expect_error(doc(plugins, "dataLayer:\n  sources:\n  - {pluginRef: src, extractors: []}\n"),
               {"exactly one core-metrics-extractor"});
  const std::string src = "  - {pluginRef: src, extractors: [{pluginRef: x}]}\n";
  expect_error(doc(plugins, "dataLayer:\n  sources:\n" + src + src), {"one source is supported"});
  expect_error(doc(plugins,
                   "dataLayer:\n  sources:\n  - {pluginRef: x, extractors: "
                   "[{pluginRef: x}]}\n"),
               {"plugin 'x' is not a metrics-data-source"});
  expect_error(doc("", "dataLayer: {discovery: {pluginRef: file}}\n"),
               {"dataLayer.discovery: not supported"});
  expect_error(doc("", "dataLayer: {peerDiscovery: {pluginRef: p}}\n"), {"peerDiscovery"});
  expect_error(doc("- name: metrics-data-source\n  type: queue-scorer\n"),
               {"plugin 'metrics-data-source' is not a metrics-data-source"});
}

TEST_F(UpstreamConfig, ProfileHandlers) {
  const auto r = load(doc("- type: single-profile-handler\n"));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.pipeline->profiles.size(), 1u);
  expect_error(
      "plugins:\n- type: single-profile-handler\n- type: latency-scorer\n"
      "schedulingProfiles:\n- {name: a, plugins: [{pluginRef: latency-scorer}]}\n"
      "- {name: b, plugins: [{pluginRef: latency-scorer}]}\n",
      {"single-profile-handler", "cannot serve 2 scheduling profiles"});
  expect_error(doc("- type: single-profile-handler\n- name: h2\n  type: single-profile-handler\n"),
               {"only one is allowed"});
  expect_error(doc("- type: pd-profile-handler\n"), {"type pd-profile-handler", "disaggregation"});
}

TEST_F(UpstreamConfig, ProducersAndAdmittersMayBeListedInProfiles) {
  const auto r = load(
      "plugins:\n- type: approx-prefix-cache-producer\n- type: predicted-latency-producer\n"
      "- type: latency-slo-admitter\n- type: latency-scorer\n"
      "schedulingProfiles:\n- name: default\n  plugins:\n"
      "  - pluginRef: predicted-latency-producer\n  - pluginRef: latency-slo-admitter\n"
      "  - pluginRef: latency-scorer\n  - pluginRef: approx-prefix-cache-producer\n");
  ASSERT_TRUE(r.ok()) << r.error;
  // They run once per request in `plugins` order, as when they are not listed.
  ASSERT_EQ(r.pipeline->producers.size(), 2u);
  EXPECT_EQ(r.pipeline->producers[0].plugin->type(), "approx-prefix-cache-producer");
  EXPECT_EQ(r.pipeline->producers[1].plugin->type(), "predicted-latency-producer");
  EXPECT_EQ(r.pipeline->admitters.size(), 1u);
  EXPECT_TRUE(r.pipeline->profiles[0].filters().empty());
  EXPECT_EQ(r.pipeline->profiles[0].scorers().size(), 1u);
  expect_error(
      "plugins:\n- type: latency-scorer\n- type: metrics-data-source\n"
      "schedulingProfiles:\n- name: default\n  plugins:\n"
      "  - pluginRef: latency-scorer\n  - pluginRef: metrics-data-source\n",
      {"metrics-data-source", "top-level section, not in a profile"});
}

TEST_F(UpstreamConfig, TheEndpointRoleLabelIsOneForTheWholeEpp) {
  const auto r =
      load(doc("- type: predicted-latency-producer\n"
               "  parameters: {endpointRoleLabel: llm-d.ai/role}\n"));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.settings.endpoint_role_label, "llm-d.ai/role");
  EXPECT_EQ(load(doc("")).settings.endpoint_role_label, "role");
  expect_error(doc("- type: predicted-latency-producer\n"
                   "  parameters: {endpointRoleLabel: llm-d.ai/role}\n"
                   "- name: second\n  type: predicted-latency-producer\n"),
               {"endpointRoleLabel 'role' differs from 'llm-d.ai/role'"});
}

TEST_F(UpstreamConfig, UpstreamPluginTypesWeDoNotHaveSayWhy) {
  expect_error(doc("- type: lora-affinity-scorer\n"), {"type lora-affinity-scorer", "LoRA"});
  expect_error(doc("- type: inflight-load-producer\n"), {"in-flight", "itself"});
  expect_error(doc("- type: no-such-plugin\n"), {"unknown plugin type", "known:"});
}

}  // namespace
}  // namespace llmd::epp
