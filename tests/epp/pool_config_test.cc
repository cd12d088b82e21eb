// The EPP config file: its decisionLog section (the run-time switch of the sampled decision
// log), its start-up tuning sections, and its one schema with upstream's EndpointPickerConfig
// (the chart's config as it is).
#include "epp/config/pool_config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "epp/plugins/register.h"
#include "epp/scheduler/config_loader.h"
#include "tests/epp/test_util.h"
#include "tests/support/process.h"

namespace llmd::epp {
namespace {

class DecisionLogConfigFile : public ::testing::Test {
 protected:
  EppFileConfig load(const std::string& decision_log) {
    const std::string path = dir_.file("pool.yaml");
    std::ofstream f(path);
    f << "pool:\n  pods:\n  - {name: pod-0, address: 127.0.0.1:9100}\n"
      << "plugins: []\nschedulingProfiles: []\n"
      << decision_log;
    f.close();
    return load_epp_config(path);
  }
  llmd::testing::TempDir dir_;
};

TEST_F(DecisionLogConfigFile, KeysTheFileSetsAndTheOthersKeepTheirDefaults) {
  EXPECT_EQ(load("").decision_log, DecisionLogConfig{});
  const DecisionLogConfig d = load("decisionLog: {sampleRate: 0.25}\n").decision_log;
  EXPECT_DOUBLE_EQ(d.sample_rate, 0.25);
  EXPECT_DOUBLE_EQ(d.max_lines_per_second, DecisionLogConfig{}.max_lines_per_second);
  EXPECT_EQ(d.max_candidates, DecisionLogConfig{}.max_candidates);
  const DecisionLogConfig all =
      load("decisionLog: {sampleRate: 1, maxLinesPerSecond: 50, maxCandidates: 3}\n").decision_log;
  EXPECT_EQ(all,
            (DecisionLogConfig{.sample_rate = 1, .max_lines_per_second = 50, .max_candidates = 3}));
}

TEST_F(DecisionLogConfigFile, BadValuesAndUnknownKeysAreRefusedByName) {
  auto error = [this](const std::string& section) {
    try {
      load(section);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("decisionLog: {sampleRate: 2}\n").find("sampleRate"), std::string::npos);
  EXPECT_NE(error("decisionLog: {maxLinesPerSecond: 0}\n").find("maxLinesPerSecond"),
            std::string::npos);
  EXPECT_NE(error("decisionLog: {maxCandidates: -1}\n").find("maxCandidates"), std::string::npos);
  EXPECT_NE(error("decisionLog: {sample_rate: 1}\n").find("unknown key 'sample_rate'"),
            std::string::npos);
  EXPECT_NE(error("decisionLog: 0.5\n").find("mapping"), std::string::npos);
}

// The tuning sections read at start (startup_settings.h), with the same file fixture.
using StartupConfigFile = DecisionLogConfigFile;

TEST_F(StartupConfigFile, TheDocumentedDefaultsAreTheOnesInForce) {
  const StartupSettings s = load("").startup;
  StartupSettings plain;
  plain.as_read = s.as_read;  // the defaults as the table documents them, the fields as coded
  EXPECT_EQ(s, plain);
  EXPECT_EQ(s.as_read.size(), startup_keys().size());
}

TEST_F(StartupConfigFile, EverySectionIsRead) {
  const StartupSettings s =
      load(
          "scrapeIntervalMs: 25\nstalenessMs: 900\n"
          "requests: {predictionBasedScheduling: false, forwardPriority: false}\n"
          "proxy: {headerTimeoutMs: 500, idleTimeoutMs: 700, upstreamFirstByteTimeoutMs: 900}\n"
          "outlierDetection: {consecutiveFailures: 2, baseEjectionMs: 100, maxEjectionMs: 400,\n"
          "  maxEjectionPercent: 33.5, panicThresholdPercent: 0}\n"
          "leaderElection: {leaseDurationSeconds: 4, renewDeadlineSeconds: 2.5,\n"
          "  retryPeriodSeconds: 0.5}\n"
          "extProc: {idleTimeoutMs: 0, streamIdleTimeoutMs: 1000, maxConnectionAgeMs: 5000,\n"
          "  maxConnectionAgeGraceMs: 200, maxHeaderListBytes: 8192, connectionBudgetShare: 0.5}\n"
          "discovery: {watchTimeoutSeconds: 30}\n")
          .startup;
  EXPECT_EQ(s.scrape_interval, std::chrono::milliseconds(25));
  EXPECT_EQ(s.staleness, std::chrono::milliseconds(900));
  EXPECT_FALSE(s.prediction_based_scheduling);
  EXPECT_FALSE(s.forward_priority);
  EXPECT_EQ(s.header_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(s.idle_timeout, std::chrono::milliseconds(700));
  EXPECT_EQ(s.upstream_first_byte_timeout, std::chrono::milliseconds(900));
  EXPECT_EQ(s.outliers.consecutive_failures, 2);
  EXPECT_EQ(s.outliers.base_ejection, std::chrono::milliseconds(100));
  EXPECT_EQ(s.outliers.max_ejection, std::chrono::milliseconds(400));
  EXPECT_DOUBLE_EQ(s.outliers.max_ejection_percent, 33.5);
  EXPECT_DOUBLE_EQ(s.outliers.panic_threshold_percent, 0);
  EXPECT_EQ(s.lease_duration, std::chrono::seconds(4));
  EXPECT_EQ(s.renew_deadline, std::chrono::milliseconds(2500));
  EXPECT_EQ(s.retry_period, std::chrono::milliseconds(500));
  EXPECT_EQ(s.ext_proc_idle_timeout, std::chrono::milliseconds(0));
  EXPECT_EQ(s.ext_proc_stream_idle_timeout, std::chrono::milliseconds(1000));
  EXPECT_EQ(s.ext_proc_max_connection_age, std::chrono::milliseconds(5000));
  EXPECT_EQ(s.ext_proc_max_connection_age_grace, std::chrono::milliseconds(200));
  EXPECT_EQ(s.ext_proc_max_header_list_bytes, 8192u);
  EXPECT_DOUBLE_EQ(s.ext_proc_connection_budget_share, 0.5);
  EXPECT_EQ(s.watch_timeout, std::chrono::seconds(30));
  // Every section of the table is a key the EPP config file accepts.
  for (const StartupKey& k : startup_keys()) {
    const std::string_view top = k.path.substr(0, k.path.find('.'));
    EXPECT_NE(std::find(kEppFileKeys.begin(), kEppFileKeys.end(), top), kEppFileKeys.end())
        << top << " (of " << k.path << ") is not in kEppFileKeys";
  }
}

TEST_F(StartupConfigFile, BadValuesNameTheKeyItsLineAndTheRange) {
  auto error = [this](const std::string& section) {
    try {
      load(section);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // The fixture's first five lines are the pool and the inline pipeline.
  EXPECT_NE(error("proxy:\n  idleTimeoutMs: 0\n")
                .find("line 7: proxy.idleTimeoutMs: 0 is out of range [1, 86400000]"),
            std::string::npos);
  EXPECT_NE(error("outlierDetection: {maxEjectionPercent: 101}\n")
                .find("outlierDetection.maxEjectionPercent: 101 is out of range [0, 100]"),
            std::string::npos);
  EXPECT_NE(error("requests: {forwardPriority: maybe}\n")
                .find("requests.forwardPriority: expected true or false, got 'maybe'"),
            std::string::npos);
  EXPECT_NE(error("proxy: {headerTimeoutMs: 1.5}\n").find("expected a whole number"),
            std::string::npos);
  EXPECT_NE(error("proxy: {headerTimeout: 10}\n")
                .find("proxy: unknown key 'headerTimeout' (known: headerTimeoutMs, "
                      "idleTimeoutMs, upstreamFirstByteTimeoutMs)"),
            std::string::npos);
  EXPECT_NE(error("proxy: 10\n").find("proxy must be a mapping"), std::string::npos);
  EXPECT_NE(error("discovery: {watchTimeoutSeconds: 0}\n")
                .find("line 6: discovery.watchTimeoutSeconds: 0 is out of range [1, 3600]"),
            std::string::npos);
  EXPECT_NE(error("discovery: {watchTimeoutSeconds: 2.5}\n")
                .find("discovery.watchTimeoutSeconds: expected a whole number"),
            std::string::npos);
  EXPECT_NE(error("outlierDetection: {baseEjectionMs: 1000, maxEjectionMs: 10}\n")
                .find("outlier max ejection time must be >= the base ejection time"),
            std::string::npos);
}

TEST_F(StartupConfigFile, ARestartIsNeededToChangeThemAndTheChangedKeysAreNamed) {
  const StartupSettings before = load("proxy: {idleTimeoutMs: 700}\n").startup;
  EXPECT_EQ(changed_startup_keys(before, load("proxy: {idleTimeoutMs: 700}\n").startup), "");
  EXPECT_EQ(changed_startup_keys(before, load("scrapeIntervalMs: 20\nproxy: {}\n"
                                              "requests: {forwardPriority: false}\n")
                                             .startup),
            "scrapeIntervalMs, requests.forwardPriority, proxy.idleTimeoutMs");
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class UpstreamConfigFile : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    const std::string path = dir_.file("epp.yaml");
    std::ofstream(path) << text;
    return path;
  }
  std::string error(const std::string& text, PodSource pods = PodSource::kConfig) {
    try {
      load_epp_config(write(text), pods);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  }
  static std::string chart(const std::string& name) {
    return read(std::string(LLMD_SOURCE_DIR) + "/tests/fixtures/upstream/configs/" + name);
  }
  llmd::testing::TempDir dir_;
};

TEST_F(UpstreamConfigFile, TheChartsConfigIsTheEppConfigFile) {
  for (const char* name : {"gie-v1.5.0-inferencepool-latency-predictor.yaml",
                           "llm-d-router-routerlib-latency-predictor.yaml"}) {
    // With our own keys beside upstream's, and without (pods from Kubernetes).
    const std::string with_pool = chart(name) +
                                  "pool:\n  pods:\n  - {name: pod-0, address: 127.0.0.1:9100}\n"
                                  "scrapeIntervalMs: 25\n";
    for (const auto& [text, pods] : {std::pair{with_pool, PodSource::kConfig},
                                     std::pair{chart(name), PodSource::kKubernetes}}) {
      const EppFileConfig cfg = load_epp_config(write(text), pods);
      EXPECT_TRUE(cfg.pipeline_path.empty()) << name;
      PluginRegistry registry;
      register_builtin_plugins(registry);
      testing::TestServices services;
      const auto r = load_pipeline(cfg.pipeline_text, registry, services.handle(), nullptr,
                                   Document::kEppFile);
      ASSERT_TRUE(r.ok()) << name << ": " << r.error;
      EXPECT_EQ(r.pipeline->profiles[0].picker().plugin->type(), "weighted-random-picker");
    }
  }
  EXPECT_EQ(load_epp_config(write(chart("gie-v1.5.0-inferencepool-latency-predictor.yaml") +
                                  "pool:\n  pods:\n  - {name: p, address: 127.0.0.1:9100}\n"
                                  "scrapeIntervalMs: 25\n"))
                .startup.scrape_interval,
            std::chrono::milliseconds(25));
}

TEST_F(UpstreamConfigFile, ApiVersionKindAndThePipelinesPlaceAreChecked) {
  const std::string pool = "pool:\n  pods:\n  - {name: p, address: 127.0.0.1:9100}\n";
  EXPECT_NE(error("apiVersion: v1\nkind: ConfigMap\n" + pool + "pipeline: p.yaml\n")
                .find("apiVersion \"v1\" is not supported"),
            std::string::npos);
  EXPECT_NE(error("apiVersion: llm-d.ai/v1alpha1\nkind: Config\n" + pool + "pipeline: p.yaml\n")
                .find("kind \"Config\""),
            std::string::npos);
  EXPECT_EQ(error("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n" + pool +
                  "pipeline: p.yaml\n"),
            "");
  EXPECT_NE(error(pool + "pipeline: p.yaml\nfeatureGates: [dataLayer]\n")
                .find("'featureGates' is given here and 'pipeline' names a file"),
            std::string::npos);
  EXPECT_NE(
      error(pool + "plugins: []\nschedulingProfiles: []\ndata: {}\n").find("unknown key 'data'"),
      std::string::npos);
}

}  // namespace
}  // namespace llmd::epp
