// The EPP's flag table: defaults, env fallbacks, precedence and the errors of bad values. The
// deploy manifests and the e2e tests rely on these names and defaults.
#include "epp/app/epp_options.h"

#include <stdlib.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/epp/app/options_test_util.h"

namespace llmd::epp {
namespace {

using std::chrono::milliseconds;

using test_env::EnvVars;
using test_env::ScopedEnv;

std::optional<EppOptions> parse(std::vector<std::string> args) {
  return test_env::parse_args(std::move(args));
}
using test_env::error_of;

const EnvVars kNoEnv = {
    {"EPP_HOST", std::nullopt},
    {"EPP_PORT", std::nullopt},
    {"EPP_HEALTH_HOST", std::nullopt},
    {"EPP_METRICS_HOST", std::nullopt},
    {"EPP_EXT_PROC_HOST", std::nullopt},
    {"EPP_DRAIN_TIMEOUT_S", std::nullopt},
    {"EPP_POOL_NAME", std::nullopt},
    {"EPP_POOL_SELECTOR", std::nullopt},
    {"EPP_IO_THREADS", std::nullopt},
    {"PREDICTION_SERVER_URL", std::nullopt},
    {"EPP_OUTLIER_BASE_EJECTION_MS", std::nullopt},
    {"EPP_LEADER_ELECT_RENEW_DEADLINE_S", std::nullopt},
    {"EPP_LEADER_ELECT", std::nullopt},
    {"EPP_TARGET_PORT", std::nullopt},
    {"PREDICTION_DEADLINE_MS", std::nullopt},
};

TEST(EppOptions, DefaultsAreTheDocumentedOnes) {
  ScopedEnv env(kNoEnv);
  const auto o = parse({});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->proxy.host, "127.0.0.1");
  EXPECT_EQ(o->proxy.port, 8080);
  EXPECT_EQ(o->health_host, "127.0.0.1");
  EXPECT_EQ(o->health_port, 9003);
  EXPECT_EQ(o->metrics_host, "127.0.0.1");
  EXPECT_EQ(o->metrics_port, 9090);
  EXPECT_EQ(o->ext_proc_port, 0);
  EXPECT_EQ(o->drain_timeout, milliseconds(25000));
  EXPECT_EQ(o->proxy.io_threads, 2);
  EXPECT_EQ(o->proxy.body_limit, 16u << 20);
  EXPECT_EQ(o->proxy.body_budget, 256u << 20);
  EXPECT_TRUE(o->prediction_server_url.empty());
  EXPECT_FALSE(o->discover());
  EXPECT_FALSE(o->leader_elect);
  // The defaults of the options that are read only when their feature is on.
  const auto on = parse({"--prediction-server-url", "http://127.0.0.1:8001", "--pool-selector",
                         "app=vllm", "--leader-elect", "true"});
  ASSERT_TRUE(on);
  EXPECT_EQ(on->predictor.coalesce_window, std::chrono::microseconds(1000));
  EXPECT_TRUE(on->predictor.adaptive_coalescing);
  EXPECT_EQ(on->discovery.target_port, 8000);
}

// As the EPP has always done: a value of a feature that is off is not looked at, so a bad one
// there does not stop the EPP; the same value with the feature on does.
TEST(EppOptions, OptionsOfAFeatureThatIsOffAreNotChecked) {
  ScopedEnv env(kNoEnv);
  EXPECT_TRUE(parse({"--target-port", "0"}));
  EXPECT_EQ(error_of({"--target-port", "0", "--pool-name", "pool"}),
            "--target-port / EPP_TARGET_PORT: 0 is out of range [1, 65535]");
}

TEST(EppOptions, EnvFillsWhatNoFlagGivesAndEmptyHostsFollowTheProxyHost) {
  ScopedEnv env(EnvVars{{"EPP_HOST", "0.0.0.0"},
                        {"EPP_HEALTH_HOST", "10.0.0.7"},
                        {"EPP_METRICS_HOST", std::nullopt},
                        {"EPP_EXT_PROC_HOST", std::nullopt},
                        {"EPP_PORT", "9191"},
                        {"EPP_DRAIN_TIMEOUT_S", "1.5"},
                        {"EPP_POOL_SELECTOR", "app=vllm, tier = decode"},
                        {"EPP_POOL_NAME", std::nullopt},
                        {"EPP_LEADER_ELECT", "true"}});
  const auto o = parse({"--port", "7000"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->proxy.port, 7000) << "a flag wins over its env";
  EXPECT_EQ(o->proxy.host, "0.0.0.0");
  EXPECT_EQ(o->health_host, "10.0.0.7");
  EXPECT_EQ(o->metrics_host, "0.0.0.0");
  EXPECT_EQ(o->ext_proc_host, "0.0.0.0");
  EXPECT_EQ(o->drain_timeout, milliseconds(1500));
  EXPECT_TRUE(o->discover());
  EXPECT_EQ(o->discovery.selector,
            (std::map<std::string, std::string>{{"app", "vllm"}, {"tier", "decode"}}));
}

TEST(EppOptions, PredictorUrlsAreSplitAndChecked) {
  ScopedEnv env(kNoEnv);
  const auto o = parse({"--prediction-server-url", "http://a:8001, http://b:8001"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->predictor.replica_urls,
            (std::vector<std::string>{"http://a:8001", "http://b:8001"}));
  EXPECT_EQ(error_of({"--prediction-server-url", "ftp://a"})
                .rfind("--prediction-server-url / PREDICTION_SERVER_URL: ", 0),
            0u);
}

TEST(EppOptions, BadValuesNameTheFlagAndItsEnv) {
  ScopedEnv env(kNoEnv);
  EXPECT_EQ(error_of({"--port", "70000"}), "--port / EPP_PORT: 70000 is out of range [0, 65535]");
  EXPECT_EQ(error_of({"--pool-selector", "app"}), "--pool-selector: expected key=value, got 'app'");
  EXPECT_NE(error_of({"--no-such-flag"}).find("no-such-flag"), std::string::npos);
  ScopedEnv bad_env(EnvVars{{"EPP_IO_THREADS", "two"}});
  EXPECT_EQ(error_of({}), "--io-threads / EPP_IO_THREADS: expected an integer, got 'two'");
}

// Tuning settings that were flags live in the config file now: the old flag or its env exits
// with the key to set instead, so a deployment that still sets one learns where it went.
TEST(EppOptions, MovedFlagsAndTheirEnvNameTheirNewHome) {
  ScopedEnv env(EnvVars{{"EPP_OUTLIER_BASE_EJECTION_MS", std::nullopt},
                        {"EPP_LEADER_ELECT_RENEW_DEADLINE_S", "0.25"}});
  EXPECT_EQ(error_of({"--outlier-base-ejection-ms", "1000"}),
            "--outlier-base-ejection-ms / EPP_OUTLIER_BASE_EJECTION_MS is no longer a flag: set "
            "`outlierDetection.baseEjectionMs` in the config file (got '1000')");
  EXPECT_EQ(error_of({}),
            "--leader-elect-renew-deadline / EPP_LEADER_ELECT_RENEW_DEADLINE_S is no longer a "
            "flag: set `leaderElection.renewDeadlineSeconds` in the config file (got '0.25')");
  ScopedEnv no_lease(EnvVars{{"EPP_LEADER_ELECT_RENEW_DEADLINE_S", std::nullopt}});
  EXPECT_EQ(error_of({"--streaming-mode", "false"}),
            "--streaming-mode / LATENCY_STREAMING_MODE is no longer a flag: set `streamingMode` "
            "in the parameters of predicted-latency-producer (upstream's place) (got 'false')");
  EXPECT_NE(error_of({"--prediction-deadline-ms", "20"}).find("`predictionDeadlineMs`"),
            std::string::npos);
}

TEST(EppOptions, InProcessPredictionsTakeTheTrainersUrlAndExcludeReplicas) {
  ScopedEnv env(EnvVars{{"PREDICTION_SERVER_URL", std::nullopt},
                        {"TRAINING_SERVER_URL", std::nullopt},
                        {"IN_PROCESS_PREDICTIONS", std::nullopt},
                        {"MODEL_SYNC_INTERVAL_SEC", std::nullopt},
                        {"MODEL_SYNC_TIMEOUT_SEC", std::nullopt},
                        {"LOCAL_MODEL_DIR", std::nullopt}});
  const auto o =
      parse({"--in-process-predictions", "true", "--training-server-url", "http://t:8000",
             "--model-sync-interval", "0.5", "--local-model-dir", "/var/models"});
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->in_process_predictions);
  EXPECT_EQ(o->in_process.trainer_url, "http://t:8000");
  EXPECT_EQ(o->in_process.sync_interval, milliseconds(500));
  EXPECT_EQ(o->in_process.sync_timeout, milliseconds(5000));
  EXPECT_EQ(o->in_process.model_dir, "/var/models");
  EXPECT_NE(error_of({"--in-process-predictions", "true", "--training-server-url", "http://t:1",
                      "--prediction-server-url", "http://p:1"})
                .find("exclude each other"),
            std::string::npos);
  EXPECT_NE(error_of({"--in-process-predictions", "true"}).find("needs --training-server-url"),
            std::string::npos);
  // Off: the sync flags are not checked.
  EXPECT_TRUE(parse({"--model-sync-interval", "0"}));
  EXPECT_EQ(error_of({"--model-sync-interval", "0", "--in-process-predictions", "true",
                      "--training-server-url", "http://t:1"}),
            "--model-sync-interval / MODEL_SYNC_INTERVAL_SEC: 0 is out of range [0.05, 86400]");
}

TEST(EppOptions, HelpParsesNothing) {
  testing::internal::CaptureStdout();
  const auto o = parse({"--help"});
  const std::string help = testing::internal::GetCapturedStdout();
  EXPECT_FALSE(o);
  EXPECT_NE(help.find("--leader-elect-identity"), std::string::npos);
  EXPECT_NE(help.find("POD_NAME"), std::string::npos);
}

}  // namespace
}  // namespace llmd::epp
