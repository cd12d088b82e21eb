// Reading each engine's exposition by upstream's mappings (GIE v1.5.0 core-metrics-extractor):
// the built-in vLLM, SGLang, trtllm-serve and Triton TensorRT-LLM names, a mapping given in the
// config, which samples count, and which pods get which mapping.
#include <gtest/gtest.h>

#include "epp/datastore/metrics_parser.h"
#include "epp/datastore/scrape_config.h"
#include "tests/epp/datastore/engine_expositions.h"
#include "tests/epp/datastore/vllm_exposition.h"

namespace llmd::epp {
namespace {

const EngineMapping& engine(std::string_view name) {
  const EngineMapping* m = builtin_engine(name);
  EXPECT_NE(m, nullptr) << name;
  return *m;
}

TEST(EngineMetrics, TheBuiltInMappingsAreUpstreamsNames) {
  EXPECT_EQ(to_string(*engine("vllm").queued), "vllm:num_requests_waiting");
  EXPECT_EQ(to_string(*engine("vllm").kv_usage), "vllm:kv_cache_usage_perc");
  EXPECT_EQ(to_string(*engine("vllm").cache_info), "vllm:cache_config_info");
  EXPECT_EQ(to_string(*engine("sglang").queued), "sglang:num_queue_reqs");
  EXPECT_EQ(to_string(*engine("sglang").running), "sglang:num_running_reqs");
  EXPECT_EQ(to_string(*engine("sglang").kv_usage), "sglang:token_usage");
  EXPECT_EQ(to_string(*engine("sglang").cache_info), "sglang:cache_config_info");
  EXPECT_EQ(engine("sglang").block_size_label, "page_size");
  EXPECT_EQ(engine("sglang").num_blocks_label, "num_pages");
  EXPECT_EQ(to_string(*engine("trtllm-serve").queued), "trtllm_num_requests_waiting");
  EXPECT_EQ(to_string(*engine("trtllm-serve").running), "trtllm_num_requests_running");
  EXPECT_EQ(to_string(*engine("trtllm-serve").kv_usage), "trtllm_kv_cache_utilization");
  EXPECT_EQ(to_string(*engine("trtllm-serve").block_size), "trtllm_kv_cache_tokens_per_block");
  EXPECT_EQ(to_string(*engine("trtllm-serve").num_blocks), "trtllm_kv_cache_max_blocks");
  const auto& triton = engine("triton-tensorrt-llm");
  EXPECT_EQ(to_string(*triton.queued), R"(nv_trt_llm_request_metrics{request_type="waiting"})");
  EXPECT_EQ(to_string(*triton.running), R"(nv_trt_llm_request_metrics{request_type="scheduled"})");
  EXPECT_EQ(to_string(*triton.kv_usage),
            R"(nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"})");
  EXPECT_EQ(builtin_engine("tgi"), nullptr);
}

TEST(EngineMetrics, VllmReadsAsItAlwaysDid) {
  const auto text = testing::vllm_exposition(4, 9, 0.625);
  auto m = parse_engine_metrics(text, engine("vllm"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->waiting, 4);
  EXPECT_EQ(m->running, 9);
  EXPECT_DOUBLE_EQ(m->kv_cache_usage, 0.625);
  EXPECT_EQ(m->block_size, 16);
  EXPECT_EQ(m->num_gpu_blocks, 29127);
  EXPECT_EQ(m->models, parse_vllm_metrics(text)->models);
}

TEST(EngineMetrics, SglangGaugesAndPages) {
  auto m = parse_engine_metrics(testing::sglang_exposition(3, 7, 0.25), engine("sglang"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->waiting, 3);
  EXPECT_EQ(m->running, 7);
  EXPECT_DOUBLE_EQ(m->kv_cache_usage, 0.25);
  EXPECT_EQ(m->block_size, 32);         // page_size
  EXPECT_EQ(m->num_gpu_blocks, 70000);  // num_pages
  EXPECT_EQ(m->models, (std::vector<std::string>{"meta-llama/Llama-3.1-8B-Instruct"}));
  EXPECT_FALSE(parse_engine_metrics(testing::vllm_exposition(), engine("sglang")))
      << "a vLLM pod read as SGLang lacks the gauges";
}

TEST(EngineMetrics, TrtllmServeGaugesAndBlockGeometry) {
  auto m =
      parse_engine_metrics(testing::trtllm_serve_exposition(1, 4, 0.5), engine("trtllm-serve"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->waiting, 1);
  EXPECT_EQ(m->running, 4);
  EXPECT_DOUBLE_EQ(m->kv_cache_usage, 0.5);
  EXPECT_EQ(m->block_size, 64);
  EXPECT_EQ(m->num_gpu_blocks, 8192);
  EXPECT_EQ(m->models, (std::vector<std::string>{"Qwen/Qwen3-32B"}));
}

TEST(EngineMetrics, TritonSamplesAreToldApartByTheirLabels) {
  auto m = parse_engine_metrics(testing::triton_trtllm_exposition(2, 6, 0.125),
                                engine("triton-tensorrt-llm"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->waiting, 2);  // request_type="waiting", not "context" or "max"
  EXPECT_EQ(m->running, 6);  // request_type="scheduled"
  EXPECT_DOUBLE_EQ(m->kv_cache_usage, 0.125);
  EXPECT_EQ(m->block_size, 128);
  EXPECT_EQ(m->num_gpu_blocks, 4096);
}

TEST(EngineMetrics, AConfiguredMappingAndWhatItLeavesOut) {
  auto spec = [](const char* text) { return std::get<MetricSpec>(parse_metric_spec(text)); };
  EngineMapping custom;
  custom.engine = "custom";
  custom.queued = spec("q{pool=\"a\"}");
  custom.running = spec("r");
  // No KV spec: not read, 0, and not needed for the pod to count as scraped.
  auto m = parse_engine_metrics("q{pool=\"b\"} 9\nq{pool=\"a\"} 3\nq{pool=\"a\"} 4\nr 1 1700000\n",
                                custom);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->waiting, 3) << "the first sample with the spec's labels";
  EXPECT_EQ(m->running, 1) << "a timestamp after the value is not the value";
  EXPECT_DOUBLE_EQ(m->kv_cache_usage, 0);
  EXPECT_EQ(m->block_size, 16) << "no cache geometry: the defaults stay";
  EXPECT_FALSE(parse_engine_metrics("q{pool=\"b\"} 9\nr 1\n", custom)) << "no sample of pool a";
  EXPECT_FALSE(parse_engine_metrics("q{pool=\"a\"} x\nr 1\n", custom)) << "an unreadable value";
}

TEST(MetricSpecs, UpstreamsSelectorSyntax) {
  auto ok = [](const char* text) {
    auto r = parse_metric_spec(text);
    EXPECT_TRUE(std::holds_alternative<MetricSpec>(r)) << text << ": " << std::get<std::string>(r);
    return std::holds_alternative<MetricSpec>(r) ? std::get<MetricSpec>(r) : MetricSpec{};
  };
  EXPECT_EQ(ok("vllm:num_requests_waiting").name, "vllm:num_requests_waiting");
  EXPECT_EQ(ok("m{b=2,a=\"1\"}").labels,
            (std::vector<std::pair<std::string, std::string>>{{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(ok(" m { a = x , } ").labels,
            (std::vector<std::pair<std::string, std::string>>{{"a", "x"}}));
  for (const char* bad : {"", "{a=1}", "m{a!=1}", "m{a=~x}", "m{a}", "m{a=1", "m x", "1m"}) {
    EXPECT_TRUE(std::holds_alternative<std::string>(parse_metric_spec(bad))) << bad;
  }
  EXPECT_NE(std::get<std::string>(parse_metric_spec("m{a!=1}")).find("only label=value"),
            std::string::npos);
}

TEST(ScrapeConfigs, APodsEngineLabelPicksItsMapping) {
  ScrapeConfig c;
  c.default_engine = "sglang";
  EXPECT_EQ(c.validate(), "");
  EXPECT_EQ(c.mapping_for({})->engine, "sglang");
  const std::string label(ScrapeConfig::kDefaultEngineLabel);
  EXPECT_EQ(c.mapping_for({{label, "trtllm-serve"}})->engine, "trtllm-serve");
  EXPECT_EQ(c.mapping_for({{label, "tgi"}})->engine, "sglang")
      << "an engine nobody maps: the default's mapping (upstream's fallback)";
  c.default_engine = "tgi";
  EXPECT_NE(c.validate().find("defaultEngine 'tgi'"), std::string::npos);
  c = ScrapeConfig{};
  c.scheme = "ftp";
  EXPECT_NE(c.validate().find("scheme"), std::string::npos);
}

}  // namespace
}  // namespace llmd::epp
