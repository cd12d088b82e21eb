// The reference sidecars' variables that are no option of ours: identities and unused names are
// logged, a value we do not implement and a name we do not support are refused naming them, and
// docs/coming-from-upstream.md lists every one.
#include "common/config/reference_env.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

namespace llmd::config {
namespace {

const std::set<std::string> kOptionEnvs = {"UVICORN_WORKERS", "PREDICT_PORT"};

std::vector<std::string> check(std::span<const ReferenceEnv> table, const Environment& env) {
  return check_reference_env(table, env, kOptionEnvs);
}

std::string refusal(std::span<const ReferenceEnv> table, const Environment& env) {
  try {
    check(table, env);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ReferenceEnv, TheChartsIdentityAndScalerPathsAreLogged) {
  const auto lines =
      check(trainer_reference_env(), {{"POD_NAME", "epp-1"},
                                      {"SERVER_TYPE", "training"},
                                      {"LATENCY_TTFT_SCALER_PATH", "/models/ttft_scaler.joblib"},
                                      {"HOME", "/root"}});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("LATENCY_TTFT_SCALER_PATH=/models/ttft_scaler.joblib is accepted and "
                           "unused",
                           0),
            0u);
  EXPECT_EQ(lines[1].rfind("POD_NAME=epp-1 (", 0), 0u);
}

TEST(ReferenceEnv, TheValueWeImplementIsAcceptedAndAnyOtherRefused) {
  const auto p = predictor_reference_env();
  EXPECT_EQ(check(p, {{"OMP_NUM_THREADS", "1"}, {"LATENCY_ENSEMBLE_MODE", "True"}}).size(), 2u);
  EXPECT_EQ(refusal(p, {{"OMP_NUM_THREADS", "bogus"}}),
            "OMP_NUM_THREADS: expected an integer, got 'bogus'");
  EXPECT_EQ(refusal(p, {{"OMP_NUM_THREADS", "4"}})
                .rfind("OMP_NUM_THREADS=4 is not supported, "
                       "only 1: ",
                       0),
            0u);
  EXPECT_EQ(refusal(p, {{"LATENCY_ENSEMBLE_MODE", "maybe"}}),
            "LATENCY_ENSEMBLE_MODE: expected true/false, got 'maybe'");
  EXPECT_NE(refusal(trainer_reference_env(), {{"LATENCY_TPOT_ZERO_TOKEN_COUNT", "true"}})
                .find("LATENCY_TPOT_ZERO_TOKEN_COUNT=true is not supported, only false"),
            std::string::npos);
}

TEST(ReferenceEnv, UnsupportedNamesAreRefusedWhateverTheValue) {
  EXPECT_EQ(refusal(predictor_reference_env(), {{"DOWNLOAD_RETRIES", "3"}})
                .rfind("DOWNLOAD_RETRIES=3 is not supported: ", 0),
            0u);
  EXPECT_NE(refusal(trainer_reference_env(), {{"LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH", "10"}}),
            "");
}

TEST(ReferenceEnv, UvicornSettingsAreRefusedUnlessAnOptionReadsThem) {
  const auto p = predictor_reference_env();
  EXPECT_TRUE(check(p, {{"UVICORN_WORKERS", "28"}}).empty()) << "an alias of --workers";
  EXPECT_NE(refusal(p, {{"UVICORN_LOG_LEVEL", "debug"}}).find("UVICORN_LOG_LEVEL=debug"),
            std::string::npos);
  EXPECT_TRUE(check(p, {{"UVICORN_HOST", ""}}).empty()) << "empty counts as unset";
}

TEST(ReferenceEnv, TheUpstreamGuideListsEveryName) {
  std::ifstream in(LLMD_SOURCE_DIR "/docs/coming-from-upstream.md");
  const std::string doc(std::istreambuf_iterator<char>(in), {});
  ASSERT_FALSE(doc.empty());
  for (auto table : {trainer_reference_env(), predictor_reference_env()}) {
    for (const auto& e : table) {
      EXPECT_NE(doc.find("`" + std::string(e.name) + "`"), std::string::npos) << e.name;
    }
  }
}

}  // namespace
}  // namespace llmd::config
