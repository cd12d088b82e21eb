// The Go EPP's command line and env on ours (epp/app/upstream_flags.h): every flag the GIE
// v1.5.0 and llm-d-router EPPs take is accepted with their meaning, or refused naming why.
#include "epp/app/upstream_flags.h"

#include <stdlib.h>

#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/epp/app/options_test_util.h"

#include "common/config/flag_table.h"
#include "epp/app/epp_options.h"

namespace llmd::epp {
namespace {

using std::chrono::milliseconds;

using test_env::EnvVars;
using test_env::ScopedEnv;

// The env a test must not inherit from the machine.
ScopedEnv clean_env() {
  return ScopedEnv(EnvVars{{"NAMESPACE", std::nullopt},
                           {"EPP_POOL_NAMESPACE", std::nullopt},
                           {"EPP_EXT_PROC_PORT", std::nullopt},
                           {"EPP_SECURE_SERVING", std::nullopt},
                           {"EPP_METRICS_ENDPOINT_AUTH", std::nullopt},
                           {"LOG_LEVEL", std::nullopt},
                           {"EPP_CONFIG", std::nullopt},
                           {"LATENCY_COALESCE_WINDOW_MS", std::nullopt},
                           {"LATENCY_MAX_CONCURRENT_DISPATCHES", std::nullopt},
                           {"LATENCY_MAX_SAMPLE_SIZE", std::nullopt},
                           {"PREDICTION_SERVER_URL", std::nullopt}});
}

// Options that must parse (a --help here is a test error).
EppOptions parse(std::vector<std::string> args) {
  auto o = test_env::parse_args(std::move(args));
  if (!o) {
    throw std::logic_error("--help");
  }
  return *o;
}
using test_env::error_of;

// The epp container's args of the GIE v1.5.0 inferencepool chart with the latency predictor
// on (tests/fixtures/upstream/gie-v1.5.0/inferencepool-latency.yaml).
const std::vector<std::string> kGieChartArgs = {"--pool-name",
                                                "vllm-llama3-8b-instruct",
                                                "--pool-namespace",
                                                "default",
                                                "--pool-group",
                                                "inference.networking.k8s.io",
                                                "--zap-encoder",
                                                "json",
                                                "--config-file",
                                                "/config/default-plugins.yaml",
                                                "--v",
                                                "1",
                                                "--tracing=false"};

TEST(UpstreamFlags, TheGieChartsArgsParseWithUpstreamsMeaning) {
  auto env = clean_env();
  const EppOptions o = parse(kGieChartArgs);
  EXPECT_EQ(o.discovery.pool_name, "vllm-llama3-8b-instruct");
  EXPECT_EQ(o.discovery.pool_namespace, "default");
  EXPECT_EQ(o.discovery.pool_group, "inference.networking.k8s.io");
  EXPECT_TRUE(o.discover());
  EXPECT_TRUE(o.upstream.log_format.json);
  EXPECT_EQ(o.config_path, "/config/default-plugins.yaml");
  EXPECT_EQ(o.log_level, "info");  // -v 1
  EXPECT_FALSE(o.leader_elect);
  // The HA variant adds a Go boolean given alone.
  std::vector<std::string> ha = kGieChartArgs;
  ha.push_back("--ha-enable-leader-election");
  EXPECT_TRUE(parse(ha).leader_elect);
}

TEST(UpstreamFlags, AliasesNameOurSettings) {
  auto env = clean_env();
  EXPECT_EQ(parse({"--grpc-port", "9002"}).ext_proc_port, 9002);
  EXPECT_EQ(parse({"--grpc-port=9102"}).ext_proc_port, 9102);
  EXPECT_EQ(parse({"--grpc-health-port", "9103"}).health_port, 9103);
  EXPECT_EQ(parse({"--config-file", "/x.yaml"}).config_path, "/x.yaml");
  EXPECT_EQ(parse({"--endpoint-selector", "app=vllm"}).pool_selector, "app=vllm");
  EXPECT_TRUE(parse({"--ha-enable-leader-election=true"}).leader_elect);
  EXPECT_FALSE(parse({"--ha-enable-leader-election=false"}).leader_elect);
  EXPECT_EQ(error_of({"--grpc-port", "9002", "--ext-proc-port", "9002"}),
            "--grpc-port and --ext-proc-port name the same setting: give one");
  EXPECT_EQ(error_of({"--config", "/a.yaml", "--config-file", "/b.yaml"}),
            "--config-file and --config name the same setting: give one");
}

TEST(UpstreamFlags, ConfigTextIsTheDocumentItself) {
  auto env = clean_env();
  const std::string text =
      "apiVersion: inference.networking.x-k8s.io/v1alpha1\n"
      "kind: EndpointPickerConfig\n";
  const EppOptions o = parse({"--config-text", text});
  std::ifstream in(o.config_path);
  std::stringstream read;
  read << in.rdbuf();
  EXPECT_EQ(read.str(), text);
  std::remove(o.config_path.c_str());
  EXPECT_EQ(error_of({"--config-text", text, "--config-file", "/b.yaml"}),
            "--config-text and --config / --config-file exclude each other");
}

TEST(UpstreamFlags, PoolGroupAndNamespace) {
  auto env = clean_env();
  EXPECT_EQ(parse({"--pool-group", "inference.networking.x-k8s.io"}).discovery.pool_group,
            "inference.networking.x-k8s.io");
  EXPECT_EQ(parse({}).discovery.pool_group, "");
  EXPECT_EQ(error_of({"--pool-group", "example.com"}),
            "--pool-group: expected inference.networking.k8s.io or "
            "inference.networking.x-k8s.io, got 'example.com'");
  ScopedEnv ns(EnvVars{{"NAMESPACE", "llm"}});
  EXPECT_EQ(parse({"--pool-name", "p"}).discovery.pool_namespace, "llm");
  EXPECT_EQ(parse({"--pool-name", "p", "--pool-namespace", "other"}).discovery.pool_namespace,
            "other");
}

TEST(UpstreamFlags, EndpointTargetPortsAreStandaloneModesPorts) {
  auto env = clean_env();
  const EppOptions o =
      parse({"--endpoint-selector", "app=vllm", "--endpoint-target-ports", "8000,8001,8000"});
  EXPECT_EQ(o.discovery.target_ports, (std::vector<uint16_t>{8000, 8001}));
  EXPECT_EQ(error_of({"--endpoint-selector", "app=vllm", "--endpoint-target-ports", "8000,x"}),
            "--endpoint-target-ports: 'x' is not a port (1-65535); expected e.g. 8000,8001");
  EXPECT_EQ(error_of({"--endpoint-target-ports", "1,2,3,4,5,6,7,8,9"}),
            "--endpoint-target-ports: 1 to 8 ports, got 9");
  EXPECT_EQ(error_of({"--pool-name", "p", "--endpoint-selector", "app=vllm"}),
            "--pool-name and --endpoint-selector / --pool-selector exclude each other: an "
            "InferencePool or a label selector");
}

TEST(UpstreamFlags, LoggingFlags) {
  auto env = clean_env();
  EXPECT_EQ(parse({}).log_level, "info");
  EXPECT_EQ(parse({"-v", "4"}).log_level, "debug");
  EXPECT_EQ(parse({"--v=5"}).log_level, "trace");
  EXPECT_EQ(parse({"-v=2"}).log_level, "info");
  EXPECT_EQ(parse({"--zap-log-level", "error"}).log_level, "error");
  EXPECT_EQ(parse({"--zap-log-level", "4", "-v", "1"}).log_level, "debug");
  EXPECT_EQ(parse({"--zap-encoder", "console"}).upstream.log_format.json, false);
  EXPECT_EQ(parse({"--zap-time-encoding", "rfc3339"}).upstream.log_format.time_encoding, "rfc3339");
  EXPECT_NO_THROW(parse({"--zap-devel=false", "--zap-stacktrace-level", "error"}));
  EXPECT_EQ(error_of({"--zap-encoder", "xml"}),
            "--zap-encoder: expected json or console, got 'xml'");
  EXPECT_EQ(error_of({"--zap-log-level", "loud"}),
            "--zap-log-level: expected debug, info, warn, error, dpanic, panic, fatal or an "
            "integer > 0, got 'loud'");
  EXPECT_EQ(error_of({"--log-level", "debug", "-v", "4"}),
            "--log-level / LOG_LEVEL and --zap-log-level / -v set the same level: give one");
}

TEST(UpstreamFlags, ServingFlags) {
  auto env = clean_env();
  const EppOptions o = parse({"--secure-serving", "--cert-path", "/certs", "--enable-cert-reload",
                              "--tls-min-version", "VersionTLS13", "--grpc-max-recv-msg-size",
                              "10MiB", "--grpc-max-send-msg-size", "25MB"});
  EXPECT_TRUE(o.upstream.secure_serving);
  EXPECT_EQ(o.upstream.cert_path, "/certs");
  EXPECT_TRUE(o.upstream.cert_reload);
  EXPECT_EQ(o.upstream.tls_min_version, "VersionTLS13");
  EXPECT_EQ(o.upstream.grpc_max_receive_bytes, 10u << 20);
  EXPECT_FALSE(parse({"--secure-serving=false"}).upstream.secure_serving);
  EXPECT_TRUE(parse({"--metrics-endpoint-auth"}).upstream.metrics_endpoint_auth);
  EXPECT_NO_THROW(parse({"--health-checking", "--enable-pprof=false", "--tracing",
                         "--enable-grpc-stream-metrics", "--allow-experimental-plugins"}));
  EXPECT_EQ(error_of({"--tls-min-version", "VersionTLS10"}),
            "--tls-min-version: expected VersionTLS12 or VersionTLS13, got 'VersionTLS10'");
  EXPECT_NE(error_of({"--tls-cipher-suites", "TLS_AES_128_GCM_SHA256"})
                .find("--tls-cipher-suites is not supported"),
            std::string::npos);
  EXPECT_NE(error_of({"--metrics-cert-dir", "/m"}).find("not supported"), std::string::npos);
  EXPECT_NE(error_of({"--emit-endpoint-scores"})
                .find("--emit-endpoint-scores=true is not "
                      "supported"),
            std::string::npos);
  EXPECT_EQ(error_of({"--grpc-max-recv-msg-size", "lots"}),
            "--grpc-max-recv-msg-size: expected a size of at least 1Ki such as 10MiB or 25MB, "
            "got 'lots'");
}

TEST(UpstreamFlags, ScrapingFlags) {
  auto env = clean_env();
  const EppOptions o = parse({"--model-server-metrics-scheme",
                              "https",
                              "--model-server-metrics-path",
                              "/prometheus/metrics",
                              "--model-server-metrics-port",
                              "9400",
                              "--model-server-metrics-https-insecure-skip-verify=false",
                              "--refresh-metrics-interval",
                              "100ms",
                              "--metrics-staleness-threshold",
                              "1m30s",
                              "--refresh-prometheus-metrics-interval",
                              "5s",
                              "--total-queued-requests-metric=\"sglang:num_queue_reqs\"",
                              "--total-running-requests-metric",
                              "sglang:num_running_reqs",
                              "--kv-cache-usage-percentage-metric",
                              "sglang:token_usage",
                              "--cache-info-metric",
                              "sglang:cache_config_info",
                              "--lora-info-metric",
                              ""});
  const UpstreamSettings& u = o.upstream;
  EXPECT_EQ(u.metrics_scheme, "https");
  EXPECT_EQ(u.metrics_path, "/prometheus/metrics");
  EXPECT_EQ(u.metrics_port, 9400);
  EXPECT_FALSE(u.metrics_insecure_skip_verify);
  EXPECT_EQ(u.scrape_interval, milliseconds(100));
  EXPECT_EQ(u.staleness, milliseconds(90000));
  EXPECT_EQ(u.queued_metric, "sglang:num_queue_reqs");  // the YAML's quotes dropped
  EXPECT_EQ(u.running_metric, "sglang:num_running_reqs");
  EXPECT_EQ(u.kv_usage_metric, "sglang:token_usage");
  EXPECT_EQ(u.cache_info_metric, "sglang:cache_config_info");
  EXPECT_EQ(u.lora_metric, "");
  EXPECT_FALSE(parse({}).upstream.scrape_interval);
  EXPECT_EQ(error_of({"--refresh-metrics-interval", "50"}),
            "--refresh-metrics-interval: expected a duration such as 50ms, 2s or 1m30s, got '50'");
  EXPECT_EQ(error_of({"--model-server-metrics-scheme", "ftp"}),
            "--model-server-metrics-scheme: expected http or https, got 'ftp'");
}

TEST(UpstreamFlags, SubsetFilterAndDrainTimeout) {
  auto env = clean_env();
  EXPECT_TRUE(parse({}).upstream.endpoint_subset_filter);
  EXPECT_FALSE(parse({"--disable-endpoint-subset-filter"}).upstream.endpoint_subset_filter);
  EXPECT_EQ(parse({"--drain-timeout", "30s"}).drain_timeout, milliseconds(30000));
  EXPECT_EQ(parse({"--drain-timeout", "2.5"}).drain_timeout, milliseconds(2500));
  EXPECT_EQ(error_of({"--drain-timeout", "soon"}),
            "--drain-timeout / EPP_DRAIN_TIMEOUT_S: expected seconds or a duration such as 30s, "
            "at most 1h, got 'soon'");
}

TEST(UpstreamFlags, ThePredictorClientsEnvIsHonouredOrRefused) {
  auto env = clean_env();
  {
    ScopedEnv chart(EnvVars{{"LATENCY_COALESCE_WINDOW_MS", "2"},
                            {"LATENCY_MAX_CONCURRENT_DISPATCHES", "36"},
                            {"LATENCY_MAX_SAMPLE_SIZE", "10000"},
                            {"PREDICTION_SERVER_URL", "http://localhost:8001"}});
    const EppOptions o = parse({});
    EXPECT_EQ(o.predictor.coalesce_window, std::chrono::microseconds(2000));
    EXPECT_EQ(o.predictor.max_concurrent_dispatches, 36u);
    EXPECT_EQ(o.feedback.max_per_flush, 10000u);
  }
  for (const char* name :
       {"LATENCY_COALESCE_WINDOW_MS", "LATENCY_MAX_CONCURRENT_DISPATCHES",
        "LATENCY_MAX_SAMPLE_SIZE", "LATENCY_FLUSH_INTERVAL_SEC", "LATENCY_HTTP_TIMEOUT_SEC",
        "LATENCY_MAX_BULK_SIZE", "LATENCY_MAX_COALESCED_ROWS", "LATENCY_METRICS_INTERVAL_SEC"}) {
    ScopedEnv bogus(EnvVars{{name, "bogus"}});
    EXPECT_EQ(error_of({}).rfind(std::string(name) + ": expected a whole number", 0), 0u)
        << name << ": " << error_of({});
  }
  ScopedEnv bogus(EnvVars{{"LATENCY_USE_NATIVE_XGBOOST", "bogus"}});
  EXPECT_EQ(error_of({}), "LATENCY_USE_NATIVE_XGBOOST: expected true or false, got 'bogus'");
}

TEST(UpstreamFlags, GoDurationsAndSizes) {
  using config::parse_go_duration;
  EXPECT_EQ(parse_go_duration("50ms"), milliseconds(50));
  EXPECT_EQ(parse_go_duration("1h2m3s"), milliseconds(3723000));
  EXPECT_EQ(parse_go_duration("1.5s"), milliseconds(1500));
  EXPECT_EQ(parse_go_duration("500us"), milliseconds(1));  // rounded up: still positive
  EXPECT_EQ(parse_go_duration("0"), milliseconds(0));
  EXPECT_FALSE(parse_go_duration("5"));
  EXPECT_FALSE(parse_go_duration("-1s"));
  EXPECT_FALSE(parse_go_duration("1d"));
  EXPECT_FALSE(parse_go_duration(""));
  EXPECT_EQ(parse_byte_size("4194304"), 4194304u);
  EXPECT_EQ(parse_byte_size("10MiB"), 10u << 20);
  EXPECT_EQ(parse_byte_size("25MB"), 25000000u);
  EXPECT_EQ(parse_byte_size("1Gi"), 1u << 30);
  EXPECT_FALSE(parse_byte_size("MiB"));
  EXPECT_FALSE(parse_byte_size("10XB"));
}

TEST(UpstreamFlags, VersionNamesTheBuild) {
  ::testing::internal::CaptureStdout();
  std::vector<std::string> args = {"epp", "--version"};
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  EXPECT_FALSE(parse_epp_options(2, argv.data()));
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(out.rfind("epp ", 0), 0u) << out;
  EXPECT_NE(out.find("(commit "), std::string::npos) << out;
}

TEST(UpstreamFlags, HelpListsThemApart) {
  ::testing::internal::CaptureStdout();
  std::vector<std::string> args = {"epp", "--help"};
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  EXPECT_FALSE(parse_epp_options(2, argv.data()));
  const std::string help = ::testing::internal::GetCapturedStdout();
  const auto section = help.find("Upstream (GIE / llm-d) flags");
  ASSERT_NE(section, std::string::npos) << help;
  EXPECT_GT(help.find("--grpc-health-port"), section);
  EXPECT_LT(help.find("--prediction-server-url"), section);
}

}  // namespace
}  // namespace llmd::epp
