// The uvicorn entrypoint's mapping: the charts' and the reference images' command lines start
// our executables with the same host, port and workers; anything else is refused by name.
#include "uvicorn/command_line.h"

#include <gtest/gtest.h>

namespace llmd::uvicorn {
namespace {

using Args = std::vector<std::string>;

Launch parse(const Args& args, const Environment& env = {}) {
  return parse_command_line(args, env);
}

// The message of the UsageError parse() throws ("" when it does not).
std::string refusal(const Args& args, const Environment& env = {}) {
  try {
    parse(args, env);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(UvicornCommandLine, TheChartsPredictorCommandWithItsWorkers) {
  // GIE v1.5.0: command uvicorn, args below; UVICORN_WORKERS=28 from the ConfigMap.
  const Launch l = parse({"prediction_server:app", "--host", "0.0.0.0", "--port", "8001"},
                         {{"UVICORN_WORKERS", "28"}, {"PREDICT_PORT", "8001"}});
  EXPECT_EQ(l.program, "predictor");
  EXPECT_EQ(l.args, (Args{"--host", "0.0.0.0", "--port", "8001", "--workers", "28"}));
  EXPECT_EQ(l.consumed_envs, (std::vector<std::string>{"UVICORN_WORKERS"}));
}

TEST(UvicornCommandLine, ThePackagedAppsOfLlmdAndTheTrainer) {
  EXPECT_EQ(parse({"llm_d_latency_predictor.prediction_server:app"}).program, "predictor");
  EXPECT_EQ(parse({"prediction.prediction_server:app"}).program, "predictor");
  // The reference trainer image's CMD; worker processes become the trainer's io threads.
  const Launch t =
      parse({"training_server:app", "--host", "0.0.0.0", "--port", "8000", "--workers", "3"});
  EXPECT_EQ(t.program, "trainer");
  EXPECT_EQ(t.args, (Args{"--host", "0.0.0.0", "--port", "8000", "--io-threads", "3"}));
}

TEST(UvicornCommandLine, UvicornsDefaultsAndPrecedence) {
  EXPECT_EQ(parse({"prediction_server:app"}).args, (Args{"--host", "127.0.0.1", "--port", "8000"}))
      << "uvicorn's defaults; no --workers: the predictor's own default";
  const Environment env = {{"UVICORN_HOST", "0.0.0.0"},
                           {"UVICORN_PORT", "9001"},
                           {"WEB_CONCURRENCY", "4"},
                           {"UVICORN_LOG_LEVEL", "warning"}};
  EXPECT_EQ(parse({"prediction_server:app"}, env).args,
            (Args{"--host", "0.0.0.0", "--port", "9001", "--workers", "4", "--log-level", "warn"}));
  EXPECT_EQ(parse({"prediction_server:app", "--port=9002", "--workers", "2"}, env).args,
            (Args{"--host", "0.0.0.0", "--port", "9002", "--workers", "2", "--log-level", "warn"}))
      << "a flag wins over its variable, which wins over WEB_CONCURRENCY";
  EXPECT_EQ(parse({"--log-level", "critical", "--", "prediction_server:app"}).args.back(),
            "critical");
  EXPECT_EQ(parse({}, {{"UVICORN_APP", "training_server:app"}}).program, "trainer");
}

TEST(UvicornCommandLine, RefusesWhatItDoesNotMapNamingIt) {
  EXPECT_NE(refusal({"prediction_server:app", "--reload"}).find("--reload"), std::string::npos);
  EXPECT_NE(refusal({"prediction_server:app", "--proxy-headers=1"}).find("--proxy-headers"),
            std::string::npos);
  EXPECT_NE(refusal({"prediction_server:app", "-h"}).find("-h"), std::string::npos);
  EXPECT_NE(refusal({"prediction_server:app"}, {{"UVICORN_RELOAD", "true"}}).find("UVICORN_RELOAD"),
            std::string::npos);
  EXPECT_NE(refusal({"prediction_server:app", "--port", "bogus"}).find("--port"),
            std::string::npos);
  EXPECT_NE(
      refusal({"prediction_server:app"}, {{"UVICORN_WORKERS", "bogus"}}).find("UVICORN_WORKERS"),
      std::string::npos);
  EXPECT_NE(refusal({"prediction_server:app"}, {{"WEB_CONCURRENCY", "0"}}).find("WEB_CONCURRENCY"),
            std::string::npos);
  EXPECT_NE(refusal({"prediction_server:app", "--port", "70000"}).find("70000"), std::string::npos);
  EXPECT_NE(refusal({"prediction_server:app", "--log-level", "loud"}).find("--log-level"),
            std::string::npos);
  EXPECT_NE(refusal({"prediction_server:app", "--port"}).find("requires an argument"),
            std::string::npos);
  EXPECT_NE(refusal({}).find("APP"), std::string::npos);
  EXPECT_NE(refusal({"main:app"}).find("main:app"), std::string::npos);
  EXPECT_NE(refusal({"prediction_server:create_app"}).find("prediction_server:create_app"),
            std::string::npos);
  EXPECT_NE(refusal({"prediction_server:app", "extra"}).find("extra"), std::string::npos);
}

TEST(UvicornCommandLine, HelpNeedsNothingElse) {
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_NE(usage().find("--workers"), std::string::npos);
}

}  // namespace
}  // namespace llmd::uvicorn
