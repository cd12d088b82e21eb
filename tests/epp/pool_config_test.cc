// The EPP config file: its decisionLog section (the run-time switch of the sampled decision
// log), and its one schema with upstream's EndpointPickerConfig (the chart's config as it is).
#include "epp/config/pool_config.h"

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
      << "plugins: []\nschedulingProfiles: []\n" << decision_log;
    f.close();
    return load_epp_config(path);
  }
  llmd::testing::TempDir dir_;
};

TEST_F(DecisionLogConfigFile, KeysTheFileSetsOverrideTheFlagsAndTheOthersKeepThem) {
  const DecisionLogConfig flags{.sample_rate = 0, .max_lines_per_second = 7, .max_candidates = 4};
  EXPECT_EQ(load("").decision_log.over(flags), flags);
  const DecisionLogConfig d = load("decisionLog: {sampleRate: 0.25}\n").decision_log.over(flags);
  EXPECT_DOUBLE_EQ(d.sample_rate, 0.25);
  EXPECT_DOUBLE_EQ(d.max_lines_per_second, 7);
  EXPECT_EQ(d.max_candidates, 4u);
  const DecisionLogConfig all =
      load("decisionLog: {sampleRate: 1, maxLinesPerSecond: 50, maxCandidates: 3}\n")
          .decision_log.over(flags);
  EXPECT_EQ(all, (DecisionLogConfig{.sample_rate = 1, .max_lines_per_second = 50,
                                    .max_candidates = 3}));
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
                .scrape_interval,
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
  EXPECT_NE(error(pool + "plugins: []\nschedulingProfiles: []\ndata: {}\n")
                .find("unknown key 'data'"),
            std::string::npos);
}

}  // namespace
}  // namespace llmd::epp
