// The EPP with the real trainer, two predictors and a modelsim pool.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <map>
#include <numeric>
#include <thread>

#include "common/features/feature_json.h"
#include "tests/common/http_test_util.h"
#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

class EppStack : public ::testing::Test {
 protected:
  void SetUp() override {
    stack_ = std::make_unique<Stack>(options());
    ASSERT_TRUE(stack_->ready) << stack_->logs();
  }
  void TearDown() override {
    if (HasFailure()) {
      std::string logs = stack_->logs();
      std::cerr << logs.substr(logs.size() > 30000 ? logs.size() - 30000 : 0);
    }
  }
  virtual StackOptions options() { return {}; }
  // Waits until the EPP has logged `n` config reloads (the EPP polls its file every second);
  // false after the 30-s hang guard.
  bool wait_for_reloads(int n) {
    for (int i = 0; i < 300; ++i) {
      const std::string log = stack_->epp->log();
      int seen = 0;
      for (auto at = log.find("config reloaded"); at != std::string::npos;
           at = log.find("config reloaded", at + 1)) {
        ++seen;
      }
      if (seen >= n) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  std::unique_ptr<Stack> stack_;
};

TEST_F(EppStack, StreamingAndNonStreamingSucceedAndFeedbackTrainsAModel) {
  std::map<std::string, int> picks;
  for (int i = 0; i < 60; ++i) {
    bool stream = i % 2 == 0;
    auto r = stack_->complete(words(40 + i, "w" + std::to_string(i)), 8, stream);
    ASSERT_EQ(r.status, 200) << r.body;
    std::string pod(r.header("x-gateway-destination-endpoint"));
    EXPECT_FALSE(pod.empty());
    ++picks[pod];
    if (stream) {
      EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
      EXPECT_NE(r.body.find("\"usage\""), std::string::npos);
    } else {
      EXPECT_EQ(Json::parse(r.body)["usage"]["completion_tokens"], 8);
    }
  }
  EXPECT_GE(picks.size(), 2u) << "traffic spreads over the pool";
  // Feedback reaches the trainer (flushed every second) and a model is trained from it. Only
  // the 30 streams are TTFT samples: a non-streaming end-to-end time is not a TTFT. The wait
  // ends on the trainer's own counts (samples stored, a retrain done); its bound only guards
  // against a hang (a pass takes 1-3 s).
  bool trained = false;
  for (int i = 0; i < 600 && !trained; ++i) {  // hang guard: 60 s
    Json s = stack_->trainer->get_json("/data/status");
    trained =
        s["training_data"]["ttft_samples"].get<int>() + s["test_data"]["ttft_samples"].get<int>() >=
            30 &&
        s["training_data"]["tpot_samples"].get<int>() > 0 && !s["last_retrain"].is_null();
    if (!trained) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_TRUE(trained) << "hang guard (60 s): the trainer did not store the 30 streams' samples "
                          "and retrain; "
                       << stack_->trainer->get("/data/status").body;
  // Predictions were used and are compared with actuals in the metrics.
  std::string m = stack_->metrics();
  EXPECT_GT(metric_sum(m, "inference_objective_request_predicted_ttft_seconds_count{"), 0) << m;
  // Only the 30 streams have a first token; all 60 have an end-to-end duration.
  EXPECT_EQ(metric_sum(m, "inference_objective_request_ttft_seconds_count{"), 30);
  EXPECT_EQ(metric_sum(m, "inference_objective_request_duration_seconds_count{"), 60);
  EXPECT_GT(metric_sum(m, "inference_objective_request_tpot_seconds_count{"), 0);
  EXPECT_GT(metric_sum(m, "llmd_epp_predictor_batch_rows_count"), 0);
  // The client-facing latencies count the EPP's own time: every request's dispatch delay is
  // observed, and the duration sum covers it.
  EXPECT_EQ(metric_sum(m, "llmd_epp_dispatch_delay_seconds_count{"), 60);
  EXPECT_GT(metric_sum(m, "inference_objective_request_duration_seconds_sum{"),
            metric_sum(m, "llmd_epp_dispatch_delay_seconds_sum{"));
  // Non-streaming requests leave the TTFT histogram as it was and add to the duration.
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(stack_->complete(words(30, "ns" + std::to_string(i)), 8, false).status, 200);
  }
  // The EPP observes a request's duration when the exchange ends, which may come a moment after
  // the client has read the answer: wait for the 65th observation (hang guard: 10 s), then
  // check that nothing else moved.
  std::string after = stack_->metrics();
  for (int i = 0;
       i < 1000 && metric_sum(after, "inference_objective_request_duration_seconds_count{") < 65;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = stack_->metrics();
  }
  EXPECT_EQ(metric_sum(after, "inference_objective_request_ttft_seconds_count{"), 30);
  EXPECT_EQ(metric_sum(after, "inference_objective_request_ttft_seconds_sum{"),
            metric_sum(m, "inference_objective_request_ttft_seconds_sum{"));
  EXPECT_EQ(metric_sum(after, "inference_objective_request_duration_seconds_count{"), 65);
}

// Model discovery as the OpenAI SDKs do it (client.models.list / retrieve).
TEST_F(EppStack, ModelsListsWhatThePodsServe) {
  auto list = stack_->client->get("/v1/models");
  ASSERT_EQ(list.status, 200) << list.body;
  const Json body = Json::parse(list.body);
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 1u) << list.body;
  EXPECT_EQ(body["data"][0]["id"], stack_->model);
  EXPECT_EQ(body["data"][0]["object"], "model");
  auto one = stack_->client->get("/v1/models/" + stack_->model);
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(Json::parse(one.body)["id"], stack_->model);
  auto missing = stack_->client->get("/v1/models/no-such-model");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Json::parse(missing.body)["error"]["type"], "not_found_error");
  // The Node SDK's models.retrieve() encodes the id as one path segment.
  ASSERT_EQ(stack_->model, "meta-llama/Llama-3.1-8B-Instruct");
  auto encoded = stack_->client->get("/v1/models/meta-llama%2FLlama-3.1-8B-Instruct");
  ASSERT_EQ(encoded.status, 200) << encoded.body;
  EXPECT_EQ(Json::parse(encoded.body)["id"], stack_->model);
  auto encoded_missing = stack_->client->get("/v1/models/org%2Fno-such-model");
  ASSERT_EQ(encoded_missing.status, 404);
  EXPECT_NE(Json::parse(encoded_missing.body)["error"]["message"].get<std::string>().find(
                "'org/no-such-model'"),
            std::string::npos)
      << encoded_missing.body;
  auto malformed = stack_->client->get("/v1/models/bad%zzid");
  ASSERT_EQ(malformed.status, 400) << malformed.body;
  EXPECT_NE(malformed.body.find("percent-encoded"), std::string::npos) << malformed.body;
  EXPECT_EQ(stack_->client->get("/v1/models").status, 200);  // still serving
}

// Token-id prompts (what benchmark tools and pre-tokenizing clients send) are scheduled, and
// the prefix index follows them: repeats of one id sequence stay on one pod.
TEST_F(EppStack, TokenIdPromptsAreRoutedWithAffinity) {
  Json ids = Json::array();
  for (int i = 0; i < 400; ++i) {
    ids.push_back(1000 + i);
  }
  std::map<std::string, int> pods;
  for (int i = 0; i < 10; ++i) {
    Json body = {{"model", stack_->model}, {"prompt", ids}, {"max_tokens", 2}};
    auto r = stack_->client->post("/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    ++pods[std::string(r.header("x-gateway-destination-endpoint"))];
  }
  int most = 0;
  for (const auto& [pod, n] : pods) {
    most = std::max(most, n);
  }
  EXPECT_GE(most, 9) << "one id sequence should stay on the pod that cached it";
}

TEST_F(EppStack, RepeatedConversationSticksToThePodHoldingItsPrefix) {
  const std::string conversation = words(400, "ctx");
  auto first = stack_->complete(conversation, 4);
  ASSERT_EQ(first.status, 200);
  std::string home(first.header("x-gateway-destination-endpoint"));
  int same = 0;
  for (int turn = 0; turn < 20; ++turn) {
    auto r = stack_->complete(conversation + words(5 + turn, "q"), 4);
    ASSERT_EQ(r.status, 200);
    same += r.header("x-gateway-destination-endpoint") == home ? 1 : 0;
  }
  EXPECT_GE(same, 18) << "a conversation should stay on " << home;
  EXPECT_NE(stack_->metrics().find("prefix_index_hit_ratio"), std::string::npos);
}

TEST_F(EppStack, FailingPodStopsReceivingTrafficAndRequestsStillSucceed) {
  http::HttpClient admin("127.0.0.1", stack_->pod_port(0));
  ASSERT_EQ(admin.post("/admin/fault", R"({"mode":"error","duration_ms":60000})").status, 200);
  int to_failing = 0;
  for (int i = 0; i < 30; ++i) {
    auto r = stack_->complete(words(30, "f" + std::to_string(i)), 4);
    ASSERT_EQ(r.status, 200) << r.body;
    to_failing += r.header("x-gateway-destination-endpoint") == stack_->pod_address(0) ? 1 : 0;
  }
  EXPECT_EQ(to_failing, 0) << "answers never come from the failing pod";
}

TEST_F(EppStack, StalledPodStopsReceivingTraffic) {
  http::HttpClient admin("127.0.0.1", stack_->pod_port(1));
  ASSERT_EQ(admin.post("/admin/fault", R"({"mode":"stall","duration_ms":60000})").status, 200);
  // Within the first-byte timeout (2 s) requests in flight move on; after the staleness bound
  // (1 s without a fresh scrape) the pod is no longer a candidate at all. The test waits for
  // the EPP to count it out (ready_pods), not for a time; the bound only guards against a hang.
  double ready = 0;
  for (int i = 0; i < 300 && (ready = metric_sum(stack_->metrics(),
                                                 "llmd_epp_pool{stat=\"ready_pods\"}")) != 3;
       ++i) {  // hang guard: 30 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(ready, 3) << "hang guard (30 s): the stalled pod's metrics never went stale";
  for (int i = 0; i < 20; ++i) {
    auto r = stack_->complete(words(30, "s" + std::to_string(i)), 4);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_NE(r.header("x-gateway-destination-endpoint"), stack_->pod_address(1));
  }
}

TEST_F(EppStack, KillingPredictorsKeepsEveryRequestSucceeding) {
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(stack_->complete(words(20, "a" + std::to_string(i)), 4).status, 200);
  }
  stack_->predictors[0]->kill_now();
  for (int i = 0; i < 20; ++i) {
    auto r = stack_->complete(words(20, "b" + std::to_string(i)), 4, i % 2 == 0);
    ASSERT_EQ(r.status, 200) << r.body;
  }
  std::string m1 = stack_->metrics();
  stack_->predictors[1]->kill_now();
  for (int i = 0; i < 20; ++i) {
    auto r = stack_->complete(words(20, "c" + std::to_string(i)), 4, i % 2 == 0);
    ASSERT_EQ(r.status, 200) << r.body;
  }
  std::string m2 = stack_->metrics();
  // Without predictors the scheduler runs on the composite fallback.
  EXPECT_GT(metric_sum(m2, "llmd_epp_scheduling_predictions_total{used=\"false\"}"),
            metric_sum(m1, "llmd_epp_scheduling_predictions_total{used=\"false\"}") + 10)
      << m2.substr(0, 4000);
}

// Our predictors get the compact exchange: every batch on /predict/bulk/columnar, none on the
// strict path.
TEST_F(EppStack, PredictionsTravelOnTheColumnarPath) {
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(stack_->complete(words(20, "col" + std::to_string(i)), 2).status, 200);
  }
  double columnar = 0, strict = 0;
  for (auto port : stack_->predictor_ports) {
    const std::string m = http::HttpClient("127.0.0.1", port).get("/metrics").body;
    const std::string name = "llmd_predictor_http_requests_total";
    columnar += metric_value(m, name, {"route=\"/predict/bulk/columnar\"", "code=\"200\""});
    strict += metric_value(m, name, {"route=\"/predict/bulk/strict\""});
  }
  EXPECT_GE(columnar, 10);
  EXPECT_EQ(strict, 0);
  const std::string m = stack_->metrics();
  EXPECT_EQ(metric_value(m, "llmd_epp_predictor_replica_columnar"), 2) << "both replicas";
  EXPECT_GE(metric_value(m, "llmd_epp_scheduling_predictions_total", {"used=\"true\""}), 10);
  EXPECT_GT(metric_value(m, "llmd_epp_predictor_body_bytes_total", {"direction=\"sent\""}), 0);
}

// Each thread of the EPP (and the predictor) has a name an operator can find in top -H, and the
// proxy works as Envoy's workers do: a request's prediction call goes out and is answered on
// the worker that read it, so the predictor client's own I/O thread stays idle.
TEST_F(EppStack, ThreadsAreNamedAndPredictionCallsRunOnTheProxyWorkers) {
  ASSERT_EQ(stack_->complete(words(20, "warm"), 2).status, 200);
  const auto before = thread_switches(stack_->epp->pid());
  for (const char* name :
       {"epp-worker-0", "epp-worker-1", "epp-scraper", "epp-coalescer", "epp-predict-io",
        "epp-pred-probe", "epp-timers", "epp-proxy", "epp-health-0", "epp-metrics-0"}) {
    EXPECT_EQ(before.count(name), 1u) << name;
  }
  const auto predictor = thread_switches(stack_->predictors.at(0)->pid());
  EXPECT_EQ(predictor.count("predictor-io-0"), 1u);
  EXPECT_EQ(predictor.count("model-sync"), 1u);
  constexpr int kRequests = 40;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_EQ(stack_->complete(words(20, "t" + std::to_string(i)), 2).status, 200);
  }
  const auto after = thread_switches(stack_->epp->pid());
  const std::string m = stack_->metrics();
  EXPECT_GE(metric_value(m, "llmd_epp_scheduling_predictions_total", {"used=\"true\""}), kRequests);
  expect_prediction_calls_on_workers(before, after, kRequests);
}

// Without predictors: the EPP syncs the trainer's models itself and predicts in process.
class EppInProcessStack : public EppStack {
  StackOptions options() override {
    StackOptions o;
    o.predictors = 0;
    o.in_process_predictions = true;
    return o;
  }
};

TEST_F(EppInProcessStack, TheTrainersModelsArePredictedInTheEppWithoutAPredictor) {
  for (int i = 0; i < 30; ++i) {
    ASSERT_EQ(stack_->complete(words(30 + i, "ip" + std::to_string(i)), 8, true).status, 200);
  }
  // The feedback trains a model (version 1 is the trainer's untrained default); the EPP's
  // sync installs it. The bounds only guard against a hang.
  auto version = [&](const std::string& name) {
    return stack_->trainer->get_json("/model/" + name + "/info")["version"].get<int64_t>();
  };
  int64_t trained = 0;
  for (int i = 0; i < 600 && trained <= 1; ++i) {  // hang guard: 60 s
    trained = std::min(version("ttft"), version("tpot"));
    if (trained <= 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_GT(trained, 1) << "hang guard (60 s): no model trained from the feedback";
  auto installed = [&](const std::string& name) {
    return metric_value(stack_->metrics(), "llmd_predictor_model_version",
                        {"model=\"" + name + "\""});
  };
  for (int i = 0; i < 300 && (installed("ttft") < 2 || installed("tpot") < 2); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // hang guard: 30 s
  }
  ASSERT_GE(installed("ttft"), 2) << stack_->metrics();
  ASSERT_GE(installed("tpot"), 2);
  const std::string before = stack_->metrics();
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(stack_->complete(words(40, "after" + std::to_string(i)), 8, true).status, 200);
  }
  const std::string after = stack_->metrics();
  const std::string used = "llmd_epp_scheduling_predictions_total";
  EXPECT_EQ(
      metric_value(after, used, {"used=\"true\""}) - metric_value(before, used, {"used=\"true\""}),
      10)
      << "every request scheduled with predictions";
  EXPECT_GE(metric_sum(after, "llmd_epp_in_process_prediction_seconds_count") -
                metric_sum(before, "llmd_epp_in_process_prediction_seconds_count"),
            10);
  EXPECT_EQ(metric_sum(after, "llmd_epp_predictor_batch_rows_count"), 0) << "no predictor asked";
}

// A stand-in for the reference (Python) predictor: /readyz and /predict/bulk/strict only, so
// its /predict/bulk/columnar is 404 as there. Its law: ttft = 10 + running, tpot = 2.
class ReferencePredictor {
 public:
  ReferencePredictor()
      : server_(http::testing::local_options(), [this](http::Request& r) { return handle(r); }) {}
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }
  std::atomic<int> strict{0};
  std::atomic<int> not_found{0};

 private:
  http::Response handle(http::Request& req) {
    if (req.method == "GET" && req.path == "/readyz") {
      return http::Response::json(200, Json{{"status", "ready"}});
    }
    if (req.method != "POST" || req.path != "/predict/bulk/strict") {
      ++not_found;
      return http::Response::detail(404, "Not Found");
    }
    ++strict;
    json::Errors errors;
    auto body = json::parse_body(req.body, errors);
    Json predictions = Json::array();
    for (const auto& row : body ? body->value("requests", Json::array()) : Json::array()) {
      features::FeatureInput f;
      json::Loc loc;
      if (!row.is_object() || !features::read_feature_input(row, loc, errors, f)) {
        return http::Response::json(422, errors.body());
      }
      predictions.push_back(
          {{"ttft_ms", 10.0 + static_cast<double>(f.num_request_running)}, {"tpot_ms", 2.0}});
    }
    return http::Response::json(200, Json{{"predictions", predictions}});
  }

  http::testing::RunningServer server_;
};

// Against a predictor without the columnar path the EPP still schedules with predictions: one
// 404, then the strict path for that replica, which stays healthy.
TEST(EppWithAReferencePredictor, FallsBackToTheStrictPathAndGetsPredictions) {
  ReferencePredictor reference;
  StackOptions o;
  o.pods = 2;
  o.predictors = 0;
  o.prediction_server_url = reference.url();
  Stack stack(o);
  ASSERT_TRUE(stack.ready) << stack.logs();
  for (int i = 0; i < 10; ++i) {
    auto r = stack.complete(words(10, "ref" + std::to_string(i)), 2);
    ASSERT_EQ(r.status, 200) << r.body;
  }
  const std::string m = stack.metrics();
  EXPECT_GE(metric_value(m, "llmd_epp_scheduling_predictions_total", {"used=\"true\""}), 10) << m;
  EXPECT_EQ(reference.not_found.load(), 1);
  EXPECT_GE(reference.strict.load(), 1);
  EXPECT_EQ(metric_value(m, "llmd_epp_predictor_replica_columnar"), 0);
  EXPECT_EQ(metric_value(m, "llmd_epp_predictor_replica_healthy"), 1);
  EXPECT_EQ(metric_value(m, "llmd_epp_predictor_errors_total", {"kind=\"http\""}), 0);
  EXPECT_NE(stack.epp->log().find("sending it /predict/bulk/strict (columnar tried again in 120 s"),
            std::string::npos)
      << stack.epp->log();
}

TEST_F(EppStack, ConfigReloadSwitchesPipelineWithoutDroppingRequests) {
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::thread traffic([&] {
    http::HttpClient c("127.0.0.1", stack_->epp_port, std::chrono::seconds(30));
    for (int i = 0; !stop; ++i) {
      Json body = {{"model", stack_->model},
                   {"prompt", words(20, "r" + std::to_string(i))},
                   {"max_tokens", 4}};
      (c.post("/v1/completions", body.dump()).status == 200 ? ok : failed)++;
    }
  });
  // Traffic runs before, during and after the reload: the test waits for the requests and the
  // reload themselves (counts and the log line), not for times; each bound is a hang guard.
  auto wait_ok = [&](int n) {
    for (int i = 0; i < 3000 && ok.load() + failed.load() < n; ++i) {  // hang guard: 30 s
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  wait_ok(10);
  stack_->write_pool("round-robin.yaml");
  const bool reloaded = wait_for_reloads(1);
  const int at_reload = ok.load() + failed.load();
  wait_ok(at_reload + 10);
  stop = true;
  traffic.join();
  ASSERT_TRUE(reloaded) << "hang guard (30 s): no config reload was logged";
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GE(ok.load(), at_reload + 10 - failed.load()) << "traffic went on after the reload";
  // Round-robin now: eight sequential requests visit every pod twice.
  std::map<std::string, int> picks;
  for (int i = 0; i < 8; ++i) {
    auto r = stack_->complete(words(10, "rr"), 2);
    ASSERT_EQ(r.status, 200);
    ++picks[std::string(r.header("x-gateway-destination-endpoint"))];
  }
  EXPECT_EQ(picks.size(), 4u);
  for (const auto& [pod, n] : picks) {
    EXPECT_EQ(n, 2) << pod;
  }
}

// A heuristic pipeline trains nothing: its requests' whole latencies must not reach the trainer
// as TTFTs. Ten streams under round-robin, then a reload to the default pipeline and one
// stream: the EPP has produced the one stream's samples only (waited on, not timed).
TEST_F(EppStack, AHeuristicPipelineSendsTheTrainerNothing) {
  stack_->write_pool("round-robin.yaml");
  ASSERT_TRUE(wait_for_reloads(1)) << "hang guard (30 s): no config reload was logged";
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(stack_->complete(words(20, "rr" + std::to_string(i)), 4, true).status, 200);
  }
  EXPECT_NE(stack_->epp->log().find("no plugin trains this pipeline"), std::string::npos);
  stack_->write_pool("default-pipeline.yaml");
  ASSERT_TRUE(wait_for_reloads(2)) << "hang guard (30 s): the second reload was not logged";
  ASSERT_EQ(stack_->complete(words(20, "trained"), 4, true).status, 200);
  double produced = 0;
  for (int i = 0; i < 300 && produced < 1; ++i) {  // hang guard: 30 s
    produced = metric_sum(stack_->metrics(), "llmd_epp_feedback_samples_produced_total");
    if (produced < 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_GE(produced, 1) << "the default pipeline's stream is a sample";
  EXPECT_LE(produced, 2) << "its TTFT and TPOT only: the ten round-robin streams sent nothing";
}

class EppUntrainedStack : public EppStack {
 protected:
  StackOptions options() override {
    StackOptions o;
    o.pods = 3;
    o.predictors = 1;
    o.trainer_args = {"--min-samples-for-retrain", "1000000"};  // never trains: cold start
    return o;
  }
};

TEST_F(EppUntrainedStack, BeforeTheFirstModelRequestsAvoidThePodPrefillingALongPrompt) {
  // The untrained model predicts one constant for every pod; the default pipeline then ranks
  // pods by the prompt work ahead of the first token (uncached tokens in flight + the
  // request's own) instead of rotating over all of them. Round-robin would put the third
  // short request behind the long prompt.
  for (int i = 0; i < 100 && metric_sum(stack_->metrics(),
                                        "llmd_epp_scheduling_predictions_total{used=\"true\"}") < 1;
       ++i) {
    ASSERT_EQ(stack_->complete(words(5, "warm" + std::to_string(i)), 2).status, 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Hold every pod's first tokens (well within the 1-s scrape staleness and the 2-s first-byte
  // timeout) so that the long prompt is still "in prefill" while the short ones are decided.
  for (int pod = 0; pod < 3; ++pod) {
    http::HttpClient admin("127.0.0.1", stack_->pod_port(pod));
    ASSERT_EQ(admin.post("/admin/fault", R"({"mode":"stall","duration_ms":900})").status, 200);
  }
  constexpr int kRequests = 5;  // the long prompt, then four short ones
  std::vector<Json> bodies;
  for (int i = 0; i < kRequests; ++i) {
    bodies.push_back(
        {{"model", stack_->model},
         {"prompt", i == 0 ? words(1500, "long") : words(5, "short" + std::to_string(i))},
         {"max_tokens", 2},
         {"stream", true}});
  }
  auto results = send_while_earlier_in_flight(*stack_, bodies, {});
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_EQ(results[i].status, 200) << "request " << i;
  }
  for (int i = 1; i < kRequests; ++i) {
    EXPECT_NE(results[i].destination, results[0].destination)
        << "short request " << i << " queued behind the long prompt";
  }
  std::string m = stack_->metrics();
  EXPECT_GE(metric_sum(m, "llmd_epp_scheduling_predictions_total{used=\"true\"}"), kRequests) << m;
}

class EppSheddingStack : public EppStack {
  StackOptions options() override {
    StackOptions o;
    o.pods = 2;
    o.modelsim_args = {"--num-gpu-blocks", "600"};
    return o;
  }
};

TEST_F(EppSheddingStack, UnreachableSloShedsSheddableRequestButServesNormalOne) {
  // Make predictions exist, then keep every pod busy (dispatched > 0, KV > 2%).
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(stack_->complete(words(50, "t" + std::to_string(i)), 6, i % 2 == 0).status, 200);
  }
  // Ten long requests: the chance that the random picker leaves a pod idle is 2/1024.
  std::vector<std::thread> busy;
  for (int i = 0; i < 10; ++i) {
    busy.emplace_back([this, i] {
      http::HttpClient c("127.0.0.1", stack_->epp_port, std::chrono::seconds(60));
      Json body = {{"model", stack_->model},
                   {"prompt", words(300, "busy" + std::to_string(i))},
                   {"max_tokens", 1000}};
      c.post("/v1/completions", body.dump());
    });
  }
  // Waits for the EPP to count the ten in flight, then for its scrapes to show every pod's KV
  // in use: until then a pod looks idle or cold and a sheddable request is rightly admitted, so
  // it is sent again (a short one) until it is shed while the long ones run (~5 s). Events,
  // not a fixed delay; the bounds only guard against a hang.
  double in_flight = 0;
  for (int i = 0; i < 300 && (in_flight = metric_sum(stack_->metrics(),
                                                     "llmd_epp_pod_in_flight{")) < 10;
       ++i) {  // hang guard: 30 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(in_flight, 10) << "hang guard (30 s): the long requests never ran";
  // The proxy counts them as requests in progress (the operator's downstream_rq_active).
  EXPECT_GE(metric_value(stack_->metrics(), "llmd_epp_requests_in_progress", {"ingress=\"proxy\""}),
            10);
  std::vector<http::Header> slo = {{"x-slo-ttft-ms", "0.001"}, {"x-slo-tpot-ms", "0.001"}};
  Json sheddable = {{"nvext", {{"agent_hints", {{"priority", -1}}}}}};
  http::ClientResponse shed;
  int admitted = 0;
  for (int i = 0; i < 40; ++i) {  // hang guard: the long requests end within ~5 s
    shed = stack_->complete(words(20, "x" + std::to_string(i)), 4, true, slo, sheddable);
    if (shed.status != 200) {
      break;
    }
    ++admitted;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto normal = stack_->complete(words(20, "y"), 4, true, slo);
  for (auto& t : busy) {
    t.join();
  }
  EXPECT_EQ(shed.status, 429) << shed.body << " (after " << admitted
                              << " sheddable requests admitted while pods looked idle)";
  // OpenAI's error object, which the SDKs turn into their RateLimitError, and a retry hint.
  const Json shed_error = Json::parse(shed.body)["error"];
  EXPECT_TRUE(shed_error["message"].is_string()) << shed.body;
  EXPECT_EQ(shed_error["type"], "rate_limit_error");
  EXPECT_EQ(shed_error["code"], "rate_limit_exceeded");
  EXPECT_TRUE(shed_error["param"].is_null());
  EXPECT_EQ(shed.header("retry-after"), "1");
  EXPECT_EQ(normal.status, 200) << normal.body;
  double in_progress = -1;
  for (int i = 0;
       i < 100 && (in_progress = metric_value(stack_->metrics(), "llmd_epp_requests_in_progress",
                                              {"ingress=\"proxy\""})) != 0;
       ++i) {  // hang guard: 10 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(in_progress, 0) << "every request answered in full";
}

// A pod of a slower class among identical ones (modelsim --slow-pods 1: pod-3 computes ~2x
// slower). The shared model sees no pod identity, so it predicts the pool's mix. The EPP
// measures each pod's first and output tokens against the model, exports pod-3's residual
// factors and scales the predictions it schedules by with them (its debug log names them).
// How much traffic that moves depends on load (routing benchmark, hetero: g-mean TTFT p95
// -22 %); on four loopback pods it is a few requests in a hundred, too few to assert on.
class HeteroPoolStack : public EppStack {
 protected:
  StackOptions options() override {
    StackOptions o;
    o.modelsim_args = {"--slow-pods", "1"};
    return o;
  }
  // `n` streamed requests of varied prompt lengths, `concurrency` at a time; picks per pod.
  std::map<std::string, int> send(int n, int concurrency, uint32_t seed) {
    std::map<std::string, int> picks;
    std::mutex mu;
    std::atomic<int> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < concurrency; ++w) {
      workers.emplace_back([&, w] {
        http::HttpClient c("127.0.0.1", stack_->epp_port, std::chrono::seconds(30));
        for (int i = next++; i < n; i = next++) {
          uint32_t h = (seed * 2654435761u) ^ (static_cast<uint32_t>(i) * 40503u + w);
          Json body = {{"model", stack_->model},
                       {"prompt", words(300 + static_cast<int>(h % 900),
                                        "s" + std::to_string(seed * 1000 + i))},
                       {"max_tokens", 16},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}}};
          auto r = c.request("POST", "/v1/completions", body.dump(), "application/json");
          std::lock_guard lock(mu);
          ++picks[r.status == 200 ? std::string(r.header("x-gateway-destination-endpoint"))
                                  : "status " + std::to_string(r.status)];
        }
      });
    }
    for (auto& t : workers) {
      t.join();
    }
    return picks;
  }
  // Pod `pod`'s residual factor for `latency` in a metrics scrape `m` (0 when absent).
  static double factor(const std::string& m, const std::string& pod, const std::string& latency) {
    std::istringstream in(m);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("llmd_epp_pod_latency_residual_factor{", 0) == 0 &&
          line.find("pod=\"" + pod + "\"") != std::string::npos &&
          line.find("latency=\"" + latency + "\"") != std::string::npos) {
        return std::stod(line.substr(line.rfind(' ') + 1));
      }
    }
    return 0;
  }
  static constexpr std::size_t kStepSamples = 60;  // step gauge readings per pod (50 ms apart)
  static std::string describe(const std::map<std::string, int>& picks) {
    std::string out;
    for (const auto& [pod, n] : picks) {
      out += pod + "=" + std::to_string(n) + " ";
    }
    return out;
  }
};

TEST_F(HeteroPoolStack, ASlowerPodIsMeasuredAgainstTheModelAndItsPredictionsAreScaled) {
  // Learn: traffic until a model is served, pod-3 has been measured on both latencies and a
  // scheduling cycle has scaled its predictions. It takes ~100 of pod-3's first tokens: the ones
  // predicted by the first, rough models are noisy, and a pod is set apart only beyond 8
  // standard errors. On a busy machine the wall-clock jitter widens those errors, so the test
  // waits for the observable outcome (each round ends when its requests have completed), not
  // for a number of rounds; the round cap only guards against a hang. The deterministic
  // counterpart on the virtual clock is ClusterSimTest.ASlowerPodIsMeasuredAgainstTheModelAnd...
  const std::string key = "pod residual factors:";
  auto logged = [&] {  // the largest factor any scheduling cycle so far scaled pod-3's TTFT by
    const std::string log = stack_->epp->log();
    double most = 0;
    for (auto at = log.find(key); at != std::string::npos; at = log.find(key, at + 1)) {
      auto eol = log.find('\n', at);
      auto line = log.substr(at, eol - at);
      auto p = line.find("pod-3 ttft x");
      if (p != std::string::npos) {
        most = std::max(most, std::stod(line.substr(p + 12)));
      }
    }
    return most;
  };
  auto bound = [&](const std::string& m, const char* latency) {
    return metric_sum(m, std::string("llmd_epp_pool_latency_bound_factor{latency=\"") + latency +
                             "\",pool=\"\"}");
  };
  // One reading of everything the test judges, taken from one metrics scrape: the gauges are
  // read once, when the outcome is reached, and asserted on as read (a second scrape later
  // would see pod-3's evidence faded by its age, PodResidual::kForget).
  struct Reading {
    std::map<std::string, double> ttft, tpot;  // residual factor per pod
    double ttft_bound = 1, tpot_bound = 1, logged = 0;
    std::string metrics;
    bool learned() const {
      return ttft.at("pod-3") > 1.25 && tpot.at("pod-3") > 1.0 && logged > 1.25 &&
             ttft_bound != 1.0 && tpot_bound != 1.0;
    }
    std::string text() const {
      std::ostringstream o;
      for (const auto& [pod, f] : ttft) {
        o << pod << " ttft x" << f << " tpot x" << tpot.at(pod) << "; ";
      }
      o << "pool bound factors ttft " << ttft_bound << " tpot " << tpot_bound
        << "; largest logged pod-3 TTFT scale " << logged;
      return o.str();
    }
  };
  auto read = [&] {
    Reading r;
    r.metrics = stack_->metrics();
    for (const char* pod : {"pod-0", "pod-1", "pod-2", "pod-3"}) {
      r.ttft[pod] = factor(r.metrics, pod, "ttft");
      r.tpot[pod] = factor(r.metrics, pod, "tpot");
    }
    r.ttft_bound = bound(r.metrics, "ttft");
    r.tpot_bound = bound(r.metrics, "tpot");
    r.logged = logged();
    return r;
  };
  std::string rounds;
  Reading r = read();
  constexpr int kHangGuardRounds = 120;  // ~5,800 requests; a pass took 8-40 rounds under load
  for (int round = 0; round < kHangGuardRounds && !r.learned(); ++round) {
    auto picks = send(48, 4, static_cast<uint32_t>(round));
    rounds += describe(picks) + "\n";
    for (const auto& [pod, n] : picks) {
      ASSERT_EQ(pod.rfind("status", 0), std::string::npos) << describe(picks);
    }
    r = read();
  }
  ASSERT_TRUE(r.learned()) << "hang guard: " << kHangGuardRounds
                           << " rounds of traffic and pod-3 was not set apart on both "
                              "latencies; "
                           << r.text() << "\npicks per round:\n"
                           << rounds;
  std::cout << "learned after " << std::count(rounds.begin(), rounds.end(), '\n')
            << " rounds: " << r.text() << std::endl;
  const double slow = r.ttft.at("pod-3");
  EXPECT_GT(slow, 1.25) << r.text();
  for (const char* fast : {"pod-0", "pod-1", "pod-2"}) {
    EXPECT_LE(r.ttft.at(fast), 1.0) << fast << ": " << r.text();
    EXPECT_LT(r.ttft.at(fast), slow) << fast << ": " << r.text();
  }
  EXPECT_GT(r.tpot.at("pod-3"), 1.0) << "its output tokens come slower too; " << r.text();
  // The decisions after it was measured scheduled by pod-3's scaled predictions.
  EXPECT_GT(r.logged, 1.25) << "no scheduling cycle scaled pod-3's predicted TTFT";

  // The served quantile models' answers carry their median next to the p90 bound, and the EPP
  // keeps both for each pick (every pick has both; the medians sum to less).
  const std::string& m = r.metrics;
  const double expected_n = metric_sum(m, "llmd_epp_request_expected_ttft_seconds_count{");
  EXPECT_EQ(expected_n, metric_sum(m, "inference_objective_request_predicted_ttft_seconds_count{"));
  EXPECT_GT(expected_n, 0);
  EXPECT_LT(metric_sum(m, "llmd_epp_request_expected_ttft_seconds_sum{"),
            metric_sum(m, "inference_objective_request_predicted_ttft_seconds_sum{"));

  // The pool's bounds were measured against what its requests took (hundreds of picks with
  // predictions, more than BoundCoverage::kMinSamples): the factor an SLO check scales them by
  // has moved off its "no evidence" 1 and stays within its clamp.
  for (double b : {r.ttft_bound, r.tpot_bound}) {
    EXPECT_GE(b, 0.5) << r.text();
    EXPECT_LE(b, 4.0) << r.text();
  }
}

// Every streamed token the EPP relays ends one forward pass of its pod: the EPP times each pod's
// steps from the streams (llmd_epp_pod_step_milliseconds, which must agree with the time per
// output token the pod itself reports, and be longer on the slow pod), and once a model is
// served, shifts the predicted TTFT of pods busy with its streams by where their step is (the
// debug log names the pods and shifts).
//
// The gauge is an EWMA over the last few token gaps (weight 0.3): one reading is a handful of
// gaps, and on a loaded machine the relay reads tokens late and in bursts (one long gap, then
// short ones), so a single reading can be off by 3x. The stream's gaps still add up to its
// decode time, so the test compares the mean of the gauge sampled all through the traffic
// (hundreds of gaps per pod) with the pod's own mean TPOT (simulated time, which the relay's
// lateness does not touch).
TEST_F(HeteroPoolStack, EachPodsStepIsTimedFromItsStreamsAndShiftsItsPredictedTtft) {
  std::string rounds;
  auto shifts = [&] { return stack_->epp->log().find("step phase:") != std::string::npos; };
  std::map<std::string, std::vector<double>> samples;  // per pod, gauge readings during traffic
  auto sample = [&] {
    const std::string m = stack_->metrics();
    for (int i = 0; i < 4; ++i) {
      const std::string pod = "pod-" + std::to_string(i);
      const std::string name = "llmd_epp_pod_step_milliseconds{pod=\"" + pod + "\"}";
      if (m.find(name) != std::string::npos) {
        samples[pod].push_back(metric_sum(m, name));
      }
    }
  };
  auto enough = [&] {
    for (int i = 0; i < 4; ++i) {
      if (samples["pod-" + std::to_string(i)].size() < kStepSamples) {
        return false;
      }
    }
    return true;
  };
  constexpr int kHangGuardRounds = 20;  // a pass takes 2-4 rounds
  for (int round = 0; round < kHangGuardRounds && !(shifts() && enough()); ++round) {
    std::atomic<bool> sending{true};
    std::thread sampler([&] {
      while (sending) {
        sample();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    auto picks = send(48, 4, static_cast<uint32_t>(200 + round));
    sending = false;
    sampler.join();
    rounds += describe(picks) + "\n";
    for (const auto& [pod, n] : picks) {
      ASSERT_EQ(pod.rfind("status", 0), std::string::npos) << describe(picks);
    }
  }
  ASSERT_TRUE(shifts() && enough())
      << "hang guard: " << kHangGuardRounds << " rounds of traffic; step phase applied " << shifts()
      << ", gauge samples per pod pod-0 " << samples["pod-0"].size() << " pod-3 "
      << samples["pod-3"].size() << "; picks per round:\n"
      << rounds;

  std::map<std::string, double> step;
  std::string report;
  for (int i = 0; i < 4; ++i) {
    const std::string pod = "pod-" + std::to_string(i);
    const auto& v = samples[pod];
    step[pod] = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    http::HttpClient c("127.0.0.1", stack_->pod_port(i));
    const std::string pm = c.get("/metrics").body;
    const double n = metric_sum(pm, "vllm:time_per_output_token_seconds_count");
    const double tpot_ms =
        n > 0 ? 1000 * metric_sum(pm, "vllm:time_per_output_token_seconds_sum") / n : 0;
    report += pod + ": EPP step " + std::to_string(step[pod]) + " ms (mean of " +
              std::to_string(v.size()) + " readings), pod's own TPOT " + std::to_string(tpot_ms) +
              " ms over " + std::to_string(n) + " requests\n";
    ASSERT_GT(n, 0) << report;
    EXPECT_GT(step[pod], 0.5 * tpot_ms) << report;
    EXPECT_LT(step[pod], 2.0 * tpot_ms) << report;
  }
  for (const char* fast : {"pod-0", "pod-1", "pod-2"}) {
    EXPECT_GT(step["pod-3"], step[fast]) << "the slow pod's steps are longer; " << report;
  }
  std::cout << report;
}

}  // namespace
}  // namespace llmd::testing
