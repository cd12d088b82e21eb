// The data-layer plugins of upstream's EndpointPickerConfig: metrics-data-source (where the
// pods' metrics are fetched) and core-metrics-extractor (how each engine's are read), and the
// two configuration plugins with no parameters, openai-parser and single-profile-handler.
#include <gtest/gtest.h>

#include "epp/plugins/datalayer/core_metrics_extractor/core_metrics_extractor.h"
#include "epp/plugins/datalayer/metrics_data_source/metrics_data_source.h"
#include "epp/plugins/parser/openai/openai_parser.h"
#include "epp/plugins/profile_handler/single/single_profile_handler.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

class DataLayerPlugins : public ::testing::Test {
 protected:
  MetricsDataSource::Target source(const nlohmann::json& params) {
    auto made = MetricsDataSourcePlugin::create("src", params, services_.handle());
    EXPECT_TRUE(made.plugin) << made.error;
    return made.plugin ? std::dynamic_pointer_cast<const MetricsDataSource>(made.plugin)->target()
                       : MetricsDataSource::Target{};
  }
  std::string source_error(const nlohmann::json& params) {
    return MetricsDataSourcePlugin::create("src", params, services_.handle()).error;
  }
  MetricsExtractor::Engines extractor(const nlohmann::json& params) {
    auto made = CoreMetricsExtractor::create("x", params, services_.handle());
    EXPECT_TRUE(made.plugin) << made.error;
    return made.plugin ? std::dynamic_pointer_cast<const MetricsExtractor>(made.plugin)->engines()
                       : MetricsExtractor::Engines{};
  }
  std::string extractor_error(const nlohmann::json& params) {
    return CoreMetricsExtractor::create("x", params, services_.handle()).error;
  }
  testing::TestServices services_;
};

TEST_F(DataLayerPlugins, MetricsDataSourceDefaultsAreUpstreams) {
  const auto t = source(nullptr);
  EXPECT_EQ(t.scheme, "http");
  EXPECT_EQ(t.path, "/metrics");
  EXPECT_TRUE(t.insecure_skip_verify);
}

TEST_F(DataLayerPlugins, MetricsDataSourceSchemePathAndTls) {
  const auto t =
      source({{"scheme", "https"}, {"path", "/prometheus/metrics"}, {"insecureSkipVerify", false}});
  EXPECT_EQ(t.scheme, "https");
  EXPECT_EQ(t.path, "/prometheus/metrics");
  EXPECT_FALSE(t.insecure_skip_verify);
  EXPECT_EQ(source({{"path", "stats"}}).path, "/stats") << "as upstream's URL: a leading '/'";
  EXPECT_EQ(source({{"path", "/m"}}).scheme, "http") << "a partial config keeps the defaults";
  EXPECT_NE(source_error({{"scheme", "grpc"}}).find("'scheme' must be http or https"),
            std::string::npos);
  EXPECT_NE(source_error({{"path", "/m?x=1"}}).find("'path'"), std::string::npos);
  EXPECT_NE(source_error({{"insecureSkipVerify", "yes"}}).find("'insecureSkipVerify'"),
            std::string::npos);
  EXPECT_NE(source_error({{"port", 9090}}).find("unknown parameter 'port'"), std::string::npos);
}

TEST_F(DataLayerPlugins, CoreMetricsExtractorDefaultsAreTheBuiltInEngines) {
  const auto e = extractor(nullptr);
  EXPECT_EQ(e.default_engine, "vllm");
  EXPECT_EQ(e.engine_label_key, "inference.networking.k8s.io/engine-type");
  EXPECT_EQ(e.engines, builtin_engines());
}

TEST_F(DataLayerPlugins, DefaultEngineNamesABuiltInOrConfiguredEngine) {
  for (const char* name : {"sglang", "triton-tensorrt-llm", "trtllm-serve", "vllm"}) {
    EXPECT_EQ(extractor({{"defaultEngine", name}}).default_engine, name);
  }
  EXPECT_NE(extractor_error({{"defaultEngine", "tgi"}}).find("defaultEngine 'tgi'"),
            std::string::npos);
  EXPECT_EQ(extractor({{"defaultEngine", ""}}).default_engine, "vllm") << "upstream: empty = vllm";
  EXPECT_EQ(extractor({{"engineLabelKey", "engine"}}).engine_label_key, "engine");
}

TEST_F(DataLayerPlugins, EngineConfigsReplaceOrAddMappings) {
  const auto e =
      extractor({{"defaultEngine", "my-engine"},
                 {"engineConfigs",
                  {{{"name", "my-engine"},
                    {"queuedRequestsSpec", "my_queue{kind=waiting}"},
                    {"runningRequestsSpec", "my_running"},
                    {"kvUsageSpec", "my_kv"},
                    {"cacheInfoSpec", "my_cache"},
                    {"cacheBlockSizeLabelName", "bs"},
                    {"cacheNumBlocksLabelName", "nb"}},
                   {{"name", "vllm"}, {"queuedRequestsSpec", "vllm:num_requests_waiting"}}}}});
  ASSERT_EQ(e.engines.size(), 5u);  // the two given, then the built-ins they do not name
  EXPECT_EQ(e.engines[0].engine, "my-engine");
  EXPECT_EQ(to_string(*e.engines[0].queued), R"(my_queue{kind="waiting"})");
  EXPECT_EQ(e.engines[0].block_size_label, "bs");
  EXPECT_EQ(e.engines[0].num_blocks_label, "nb");
  EXPECT_EQ(e.engines[1].engine, "vllm");
  EXPECT_FALSE(e.engines[1].running) << "an entry replaces the built-in whole (upstream)";
  EXPECT_FALSE(e.engines[1].kv_usage);
  EXPECT_EQ(e.engines[2].engine, "sglang");
  auto with = [](nlohmann::json entry) {
    return nlohmann::json{{"engineConfigs", nlohmann::json::array({std::move(entry)})}};
  };
  EXPECT_NE(extractor_error(with({{"name", "default"}})).find("reserved"), std::string::npos);
  EXPECT_NE(extractor_error(with({{"queuedRequestsSpec", "q"}})).find("'name' is required"),
            std::string::npos);
  EXPECT_NE(extractor_error(with({{"name", "e"}, {"kvUsageSpec", "kv{a!=1}"}}))
                .find("engineConfigs[0]: parameter 'kvUsageSpec'"),
            std::string::npos);
  EXPECT_NE(extractor_error(with({{"name", "e"}, {"queueSpec", "q"}}))
                .find("unknown parameter 'queueSpec'"),
            std::string::npos);
  EXPECT_NE(extractor_error({{"engineConfigs", {{{"name", "e"}}, {{"name", "e"}}}}})
                .find("configured twice"),
            std::string::npos);
  EXPECT_NE(extractor_error({{"engineConfigs", "vllm"}}).find("must be a list"), std::string::npos);
}

TEST_F(DataLayerPlugins, ParserAndProfileHandlerTakeNoParameters) {
  auto h = services_.handle();
  EXPECT_TRUE(std::dynamic_pointer_cast<const RequestParser>(
      OpenAiParser::create("openai-parser", nullptr, h).plugin));
  EXPECT_FALSE(OpenAiParser::create("p", {{"strict", true}}, h).plugin);
  EXPECT_TRUE(std::dynamic_pointer_cast<const ProfileHandler>(
      SingleProfileHandler::create("single-profile-handler", nullptr, h).plugin));
  EXPECT_FALSE(SingleProfileHandler::create("h", {{"primary", "default"}}, h).plugin);
}

}  // namespace
}  // namespace llmd::epp
