// The EPP config file's decisionLog section: the run-time switch of the sampled decision log.
#include "epp/pool_config.h"

#include <fstream>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace llmd::epp
