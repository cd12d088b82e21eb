// The real `epp` binary given the GIE chart's rendered EndpointPickerConfig as its config file
// (tests/fixtures/upstream/configs/, with our pool section beside it) in front of fake pods of
// another engine than vLLM: the chart's core-metrics-extractor defaultEngine and
// metrics-data-source path decide how the pods are scraped, which the pool gauges and routing
// show. And an upstream key it cannot honour: exit 2 with the key named.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/http/client.h"
#include "tests/common/http_test_util.h"
#include "tests/epp/datastore/engine_expositions.h"
#include "tests/support/process.h"

namespace llmd::testing {
namespace {

// A model server: `exposition` at `metrics_path`, and a one-token answer to /v1/completions.
class EnginePod {
 public:
  EnginePod(std::string metrics_path, std::string exposition)
      : metrics_path_(std::move(metrics_path)),
        exposition_(std::move(exposition)),
        server_(http::testing::local_options(), [this](http::Request& r) {
          if (r.method == "GET" && r.path == metrics_path_) {
            return http::Response::text(200, exposition_, "text/plain; version=0.0.4");
          }
          if (r.method == "POST" && r.path == "/v1/completions") {
            ++completions;
            return http::Response::json(
                200, nlohmann::json{
                         {"id", "c"},
                         {"object", "text_completion"},
                         {"choices", {{{"index", 0}, {"text", "ok"}, {"finish_reason", "stop"}}}},
                         {"usage",
                          {{"prompt_tokens", 2}, {"completion_tokens", 1}, {"total_tokens", 3}}}});
          }
          return http::Response::detail(404, "Not Found");
        }) {}
  std::string address() const { return "127.0.0.1:" + std::to_string(server_.port()); }
  std::atomic<int> completions{0};

 private:
  const std::string metrics_path_, exposition_;
  http::testing::RunningServer server_;
};

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The chart's config as `helm template` renders it for `engine` (its defaultEngine parameter)
// and `path` (inferenceExtension.metricsDataSource.path), then our pool beside it.
std::string chart_config(const std::string& engine, const std::string& path,
                         const std::vector<const EnginePod*>& pods) {
  std::string text = read(std::string(LLMD_SOURCE_DIR) +
                          "/tests/fixtures/upstream/configs/"
                          "gie-v1.5.0-inferencepool-latency-predictor.yaml");
  auto replace = [&text](const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  };
  replace("- type: core-metrics-extractor\n",
          "- type: core-metrics-extractor\n  parameters:\n    defaultEngine: \"" + engine + "\"\n");
  replace("path: \"/metrics\"", "path: \"" + path + "\"");
  text += "pool:\n  pods:\n";
  for (std::size_t i = 0; i < pods.size(); ++i) {
    text += "  - {name: pod-" + std::to_string(i) + ", address: " + pods[i]->address() + "}\n";
  }
  return text;
}

double pool_stat(uint16_t metrics_port, const std::string& stat) {
  http::HttpClient c("127.0.0.1", metrics_port, std::chrono::seconds(5));
  const std::string body = c.get("/metrics").body;
  const std::string key = "llmd_epp_pool{stat=\"" + stat + "\"} ";
  const auto at = body.find(key);
  return at == std::string::npos ? -1 : std::stod(body.substr(at + key.size()));
}

struct Epp {
  explicit Epp(const std::string& config_text) {
    std::ofstream(dir.file("epp.yaml")) << config_text;
    process = std::make_unique<Process>(
        binary("epp/epp"),
        std::vector<std::string>{"--config", dir.file("epp.yaml"), "--host", "127.0.0.1", "--port",
                                 std::to_string(port), "--health-port", std::to_string(health),
                                 "--metrics-port", std::to_string(metrics),
                                 "--prediction-server-url", ""});
  }
  // Every pod ready (a fresh scrape read with its engine's gauges), within a hang bound.
  bool ready_pods(double n) {
    for (int i = 0; i < 200; ++i) {  // hang guard: 20 s
      if (pool_stat(metrics, "ready_pods") == n) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  TempDir dir;
  uint16_t port = free_port(), health = free_port(), metrics = free_port();
  std::unique_ptr<Process> process;
};

void expect_engine_read(const std::string& engine, const std::string& path, EnginePod& a,
                        EnginePod& b) {
  Epp epp(chart_config(engine, path, {&a, &b}));
  ASSERT_TRUE(epp.process->wait_http_ok(epp.health, "/healthz")) << epp.process->log();
  ASSERT_TRUE(epp.ready_pods(2)) << epp.process->log();
  EXPECT_DOUBLE_EQ(pool_stat(epp.metrics, "avg_waiting"), 3);  // both fakes queue 3
  EXPECT_DOUBLE_EQ(pool_stat(epp.metrics, "avg_kv_cache_usage"), 0.25);
  EXPECT_NE(epp.process->log().find("read as " + engine), std::string::npos);
  http::HttpClient client("127.0.0.1", epp.port, std::chrono::seconds(10));
  for (int i = 0; i < 4; ++i) {
    const auto r = client.post(
        "/v1/completions",
        nlohmann::json{
            {"model", "m"}, {"prompt", "hello there " + std::to_string(i)}, {"max_tokens", 1}}
            .dump());
    EXPECT_EQ(r.status, 200) << r.body;
  }
  EXPECT_EQ(a.completions + b.completions, 4);
}

TEST(EppUpstreamConfig, TheGieChartConfigScrapesSglangPodsWithSglangGauges) {
  EnginePod a("/metrics", epp::testing::sglang_exposition(3, 1, 0.25));
  EnginePod b("/metrics", epp::testing::sglang_exposition(3, 2, 0.25));
  expect_engine_read("sglang", "/metrics", a, b);
}

TEST(EppUpstreamConfig, TrtllmServePodsAreScrapedAtTheConfiguredPath) {
  EnginePod a("/prometheus/metrics", epp::testing::trtllm_serve_exposition(3, 1, 0.25));
  EnginePod b("/prometheus/metrics", epp::testing::trtllm_serve_exposition(3, 2, 0.25));
  expect_engine_read("trtllm-serve", "/prometheus/metrics", a, b);
}

TEST(EppUpstreamConfig, AnUpstreamKeyItCannotHonourStopsItNamingTheKey) {
  EnginePod a("/metrics", epp::testing::sglang_exposition());
  Epp epp(chart_config("sglang", "/metrics", {&a}) + "featureGates: [flowControl]\n");
  const std::string why = "featureGates: flowControl is not supported";
  for (int i = 0; i < 200 && epp.process->log().find(why) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // hang guard: 10 s
  }
  EXPECT_NE(epp.process->log().find(why), std::string::npos) << epp.process->log();
  EXPECT_EQ(epp.process->terminate(), 2) << "2 = bad configuration";
}

}  // namespace
}  // namespace llmd::testing
