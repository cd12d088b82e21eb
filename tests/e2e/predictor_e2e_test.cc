// The real trainer and predictor binaries together: sync, exact agreement, every feature used,
// ensemble routing, resilience to a dead trainer, and bad input.
#include <gtest/gtest.h>

#include <bit>
#include <random>
#include <thread>

#include "common/features/feature_json.h"
#include "common/model/latency_model.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/testing/synthetic_law.h"
#include "tests/e2e/trainer_fixture.h"

namespace llmd::testing {
namespace {

struct PredictorProcess {
  PredictorProcess(const std::string& dir, uint16_t trainer_port,
                   std::vector<std::string> extra = {})
      : port(free_port()) {
    std::vector<std::string> args = {"--host",
                                     "127.0.0.1",
                                     "--port",
                                     std::to_string(port),
                                     "--training-server-url",
                                     "http://127.0.0.1:" + std::to_string(trainer_port),
                                     "--model-sync-interval",
                                     "0.2",
                                     "--local-ttft-model-path",
                                     dir + "/ttft.ubj",
                                     "--local-tpot-model-path",
                                     dir + "/tpot.ubj",
                                     "--local-ttft-gated-model-path",
                                     dir + "/ttft_gated.bin",
                                     "--local-tpot-gated-model-path",
                                     dir + "/tpot_gated.bin",
                                     "--workers",
                                     "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    process = std::make_unique<Process>(binary("predictor/predictor"), args);
    started = process->wait_http_ok(port, "/healthz");
    client = std::make_unique<http::HttpClient>("127.0.0.1", port, std::chrono::seconds(30));
  }
  http::ClientResponse post(const std::string& path, const Json& body) {
    return client->post(path, body.dump());
  }
  Json get_json(const std::string& path) { return Json::parse(client->get(path).body); }
  uint16_t port;
  std::unique_ptr<Process> process;
  std::unique_ptr<http::HttpClient> client;
  bool started = false;
};

Json training_body(const SyntheticLaw& law, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Json entries = Json::array();
  for (int i = 0; i < n; ++i) {
    auto f = law.draw_features(rng);
    Json e = features::feature_input_to_json(f);
    e["actual_ttft_ms"] = law.draw_ttft(f, rng);
    e["actual_tpot_ms"] = law.draw_tpot(f, rng);
    entries.push_back(e);
  }
  return Json{{"entries", entries}};
}

bool wait_until(const std::function<bool()>& pred, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// One trained trainer + one synced predictor shared by the tests of this suite.
class TrainedStack : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    trainer_dir_ = new TempDir();
    predictor_dir_ = new TempDir();
    trainer_ = new TrainerProcess(trainer_dir_->path(), {"--retraining-interval", "0.5"});
    ASSERT_TRUE(trainer_->ready) << trainer_->process->log();
    predictor_ = new PredictorProcess(predictor_dir_->path(), trainer_->port);
    ASSERT_TRUE(predictor_->started) << predictor_->process->log();
    SyntheticLaw law;
    law.inflight_signal = true;
    ASSERT_EQ(trainer_->post("/add_training_data_bulk", training_body(law, 3000, 1)).status, 202);
    ASSERT_TRUE(wait_until(
        [] {
          return trainer_->get_json("/model/ttft/info")["version"].get<int64_t>() > 1 &&
                 trainer_->get_json("/model/tpot/info")["version"].get<int64_t>() > 1 &&
                 trainer_->get("/model/ttft_gated/info").status == 200;
        },
        std::chrono::seconds(60)))
        << trainer_->process->log();
    auto r = predictor_->client->post("/reload", "");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  static void TearDownTestSuite() {
    delete predictor_;
    delete trainer_;
    delete predictor_dir_;
    delete trainer_dir_;
  }
  static Json bulk(const std::vector<Json>& rows,
                   const std::string& path = "/predict/bulk/strict") {
    auto r = predictor_->post(path, Json{{"requests", rows}});
    EXPECT_EQ(r.status, 200) << r.body;
    return Json::parse(r.body);
  }
  static TempDir* trainer_dir_;
  static TempDir* predictor_dir_;
  static TrainerProcess* trainer_;
  static PredictorProcess* predictor_;
};
TempDir* TrainedStack::trainer_dir_ = nullptr;
TempDir* TrainedStack::predictor_dir_ = nullptr;
TrainerProcess* TrainedStack::trainer_ = nullptr;
PredictorProcess* TrainedStack::predictor_ = nullptr;

TEST_F(TrainedStack, SyncedVersionsMatchTheTrainer) {
  Json status = predictor_->get_json("/status");
  EXPECT_EQ(status["is_ready"], true);
  EXPECT_EQ(status["ensemble_active"], true);
  EXPECT_EQ(status["model_versions"]["ttft"], trainer_->get_json("/model/ttft/info")["version"]);
  EXPECT_EQ(status["model_versions"]["tpot_gated"],
            trainer_->get_json("/model/tpot_gated/info")["version"]);
  EXPECT_EQ(predictor_->get_json("/readyz")["status"], "ready");
}

TEST_F(TrainedStack, PredictionsMatchTheTrainerExactly) {
  SyntheticLaw law;
  std::mt19937_64 rng(42);
  std::vector<Json> rows;
  for (int i = 0; i < 300; ++i) {
    auto f = law.draw_features(rng);
    f.pod_type = static_cast<features::PodType>(i % 4 - 1);
    rows.push_back(features::feature_input_to_json(f));
  }
  Json strict = bulk(rows);
  Json loose = bulk(rows, "/predict/bulk");
  ASSERT_EQ(strict["predictions"].size(), rows.size());
  EXPECT_EQ(strict["successful_predictions"], 300);
  EXPECT_EQ(loose["errors"], Json::array());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Json t = Json::parse(trainer_->post("/predict", rows[i]).body);
    Json single = Json::parse(predictor_->post("/predict", rows[i]).body);
    const Json& p = strict["predictions"][i];
    EXPECT_EQ(p["ttft_ms"].get<double>(), t["ttft_ms"].get<double>()) << rows[i].dump();
    EXPECT_EQ(p["tpot_ms"].get<double>(), t["tpot_ms"].get<double>()) << rows[i].dump();
    EXPECT_EQ(single["ttft_ms"], p["ttft_ms"]);
    // The central estimate (the quantile model's median) sits under its p90 bound.
    EXPECT_EQ(single["ttft_expected_ms"], p["ttft_expected_ms"]);
    EXPECT_GT(p["ttft_expected_ms"].get<double>(), 0) << rows[i].dump();
    EXPECT_LE(p["ttft_expected_ms"].get<double>(), p["ttft_ms"].get<double>()) << rows[i].dump();
    EXPECT_LE(p["tpot_expected_ms"].get<double>(), p["tpot_ms"].get<double>()) << rows[i].dump();
    EXPECT_EQ(loose["predictions"][i]["tpot_ms"], p["tpot_ms"]);
  }
  EXPECT_EQ(strict["predictions"][0]["model_type"], "xgboost");
  EXPECT_TRUE(strict["predictions"][0]["last_model_load"].is_string());
}

TEST_F(TrainedStack, TtftRisesWithInputAndEveryRouteUsesInflightFeatures) {
  std::vector<Json> rows;
  for (int64_t len : {100, 1000, 2000, 3500}) {
    rows.push_back(feature_row(0.3, len, 0, 8, 0.0));
  }
  Json p = bulk(rows);
  for (std::size_t i = 1; i < rows.size(); ++i) {
    EXPECT_GT(p["predictions"][i]["ttft_ms"].get<double>(),
              p["predictions"][i - 1]["ttft_ms"].get<double>());
  }
  for (int64_t waiting : {0, 3}) {
    Json idle = feature_row(0.3, 1000, waiting, 8, 0.0);
    Json busy = idle;
    busy["prefill_tokens_in_flight"] = 7000;
    busy["decode_tokens_in_flight"] = 3500;
    for (const char* route : {"/predict/bulk", "/predict/bulk/strict"}) {
      Json b = bulk({idle, busy}, route);
      EXPECT_GT(b["predictions"][1]["ttft_ms"].get<double>(),
                b["predictions"][0]["ttft_ms"].get<double>() + 30)
          << route << " waiting " << waiting;
      EXPECT_GT(b["predictions"][1]["tpot_ms"].get<double>(),
                b["predictions"][0]["tpot_ms"].get<double>() + 3)
          << route;
    }
    double a = Json::parse(predictor_->post("/predict", idle).body)["ttft_ms"].get<double>();
    double b = Json::parse(predictor_->post("/predict", busy).body)["ttft_ms"].get<double>();
    EXPECT_GT(b, a + 30) << "/predict";
  }
}

TEST_F(TrainedStack, EnsembleRoutesWaitingZeroToNoQueueModel) {
  auto gated = model::GatedModel::load(trainer_->get("/model/ttft_gated/download").body);
  auto base = model::TargetModel::load(trainer_->get("/model/ttft/download").body);
  features::FeatureInput f;
  f.kv_cache_percentage = 0.4;
  f.input_token_length = 1500;
  f.num_request_running = 6;
  for (int64_t waiting : {0, 4}) {
    f.num_request_waiting = waiting;
    std::vector<features::FeatureInput> row{f};
    double expected = (waiting == 0 ? gated->noqueue : gated->queued)->predict(row)[0];
    double got =
        Json::parse(
            predictor_->post("/predict", features::feature_input_to_json(f)).body)["ttft_ms"]
            .get<double>();
    EXPECT_EQ(got, expected) << "waiting " << waiting;
    EXPECT_NE(got, base->predict(row)[0]) << "the base model would give another answer";
  }
}

TEST_F(TrainedStack, BadInputIs422Or413AndServerKeepsServing) {
  Json good = feature_row(0.3, 100, 0, 1, 0.0);
  auto expect_422 = [](const http::ClientResponse& r, const Json& loc) {
    ASSERT_EQ(r.status, 422) << r.body;
    Json d = Json::parse(r.body)["detail"];
    ASSERT_TRUE(d.is_array());
    if (!loc.is_null()) {
      EXPECT_EQ(d[0]["loc"], loc) << r.body;
    }
  };
  for (const char* route : {"/predict/bulk", "/predict/bulk/strict"}) {
    for (auto [field, value] :
         std::vector<std::pair<std::string, Json>>{{"kv_cache_percentage", 1.5},
                                                   {"input_token_length", -1},
                                                   {"num_request_waiting", 0.5},
                                                   {"num_request_running", "x"},
                                                   {"prefix_cache_score", nullptr},
                                                   {"pod_type", 7},
                                                   {"prefill_tokens_in_flight", -3}}) {
      Json bad = good;
      bad[field] = value;
      expect_422(predictor_->post(route, Json{{"requests", {good, bad}}}),
                 Json::array({"body", "requests", 1, field}));
    }
    Json missing = good;
    missing.erase("num_tokens_generated");
    expect_422(predictor_->post(route, Json{{"requests", {missing}}}),
               Json::array({"body", "requests", 0, "num_tokens_generated"}));
    expect_422(predictor_->post(route, Json{{"requests", Json::array()}}),
               Json::array({"body", "requests"}));
    std::vector<Json> many(10001, good);
    expect_422(predictor_->post(route, Json{{"requests", many}}),
               Json::array({"body", "requests"}));
    expect_422(predictor_->client->post(route, "{\"requests\": [{"), Json());
    expect_422(predictor_->post(route, Json{{"requests", {1, 2}}}),
               Json::array({"body", "requests", 0}));
  }
  std::vector<Json> max_rows(10000, good);
  EXPECT_EQ(bulk(max_rows)["total_requests"], 10000);
  expect_422(predictor_->client->post("/predict", "[1,2]"), Json::array({"body"}));
  expect_422(predictor_->post("/predict", Json{{"kv_cache_percentage", 0.1}}), Json());
  EXPECT_EQ(predictor_->post("/predict", good).status, 200);
}

// Rows as columns (/predict/bulk/columnar, ours): each field a list, or one value for all rows.
Json as_columns(const std::vector<Json>& rows) {
  Json out = Json::object();
  for (const auto& row : rows) {
    for (auto& [key, value] : row.items()) {
      out[key].push_back(value);
    }
  }
  for (auto& [key, column] : out.items()) {
    if (key != "kv_cache_percentage" &&
        std::all_of(column.begin(), column.end(), [&](const Json& v) { return v == column[0]; })) {
      column = Json(column[0]);
    }
  }
  return out;
}

// The columnar endpoint answers the same numbers, bit for bit, as /predict/bulk/strict (both
// ensemble halves, every pod type, single values broadcast), with the metadata once.
TEST_F(TrainedStack, ColumnarAnswersEqualStrictBitForBit) {
  SyntheticLaw law;
  law.inflight_signal = true;
  std::mt19937_64 rng(11);
  std::vector<Json> rows;
  for (int i = 0; i < 1000; ++i) {
    auto f = law.draw_features(rng);
    f.pod_type = static_cast<features::PodType>(i % 4 - 1);
    f.num_request_waiting = i % 3 == 0 ? 0 : f.num_request_waiting;
    f.num_tokens_generated = 1;  // the same in every row: sent once
    f.encoder_input_size = i % 5;
    rows.push_back(features::feature_input_to_json(f));
  }
  const Json body = as_columns(rows);
  ASSERT_TRUE(body["num_tokens_generated"].is_number());
  ASSERT_TRUE(body["num_request_waiting"].is_array());
  const auto strict_raw = predictor_->post("/predict/bulk/strict", Json{{"requests", rows}});
  const auto columnar_raw = predictor_->post("/predict/bulk/columnar", body);
  ASSERT_EQ(strict_raw.status, 200) << strict_raw.body;
  ASSERT_EQ(columnar_raw.status, 200) << columnar_raw.body;
  const Json strict = Json::parse(strict_raw.body);
  const Json c = Json::parse(columnar_raw.body);
  for (const char* key : {"ttft_ms", "tpot_ms", "ttft_expected_ms", "tpot_expected_ms"}) {
    ASSERT_EQ(c[key].size(), rows.size()) << key;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const double a = c[key][i].get<double>();
      const double b = strict["predictions"][i][key].get<double>();
      ASSERT_EQ(std::bit_cast<uint64_t>(a), std::bit_cast<uint64_t>(b))
          << key << " row " << i << ": " << a << " vs " << b << " " << rows[i].dump();
    }
  }
  const Json& first = strict["predictions"][0];
  for (const char* key : {"model_type", "objective_type", "quantile", "last_model_load"}) {
    EXPECT_EQ(c[key], first[key]) << key;
  }
  EXPECT_TRUE(c["predicted_at"].is_string());
  EXPECT_FALSE(c.contains("predictions"));
  std::cerr << "1000 rows: strict " << Json{{"requests", rows}}.dump().size() << " B out, "
            << strict_raw.body.size() << " B back; columnar " << body.dump().size() << " B out, "
            << columnar_raw.body.size() << " B back\n";
}

// Validation as strict as /predict/bulk/strict's, each error located at its field (and row).
TEST_F(TrainedStack, ColumnarBadInputIs422AtTheValue) {
  const Json good = {{"kv_cache_percentage", {0.3, 0.4}}, {"input_token_length", 100},
                     {"num_request_waiting", {0, 1}},     {"num_request_running", 2},
                     {"num_tokens_generated", 1},         {"prefix_cache_score", 0.0}};
  auto post = [](const std::string& body) {
    return predictor_->client->post("/predict/bulk/columnar", body);
  };
  const auto ok = post(good.dump());
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(Json::parse(ok.body)["ttft_ms"].size(), 2u);
  auto expect_422 = [](const http::ClientResponse& r, const Json& loc, const std::string& type) {
    ASSERT_EQ(r.status, 422) << r.body;
    const Json d = Json::parse(r.body)["detail"];
    ASSERT_TRUE(d.is_array() && !d.empty()) << r.body;
    if (!loc.is_null()) {
      EXPECT_EQ(d[0]["loc"], loc) << r.body;
    }
    EXPECT_EQ(d[0]["type"], type) << r.body;
    EXPECT_TRUE(d[0].contains("msg") && d[0].contains("input")) << r.body;
  };
  struct Case {
    const char* field;
    Json value;
    Json loc;
    const char* type;
  };
  const std::vector<Case> cases = {
      {"kv_cache_percentage", {0.3, 1.5}, {"body", "kv_cache_percentage", 1}, "less_than_equal"},
      {"input_token_length", -1, {"body", "input_token_length"}, "greater_than_equal"},
      {"num_request_waiting", {0, 0.5}, {"body", "num_request_waiting", 1}, "int_from_float"},
      {"num_request_running", "x", {"body", "num_request_running"}, "int_type"},
      {"prefix_cache_score", nullptr, {"body", "prefix_cache_score"}, "float_type"},
      {"pod_type", {7, "decode"}, {"body", "pod_type", 0}, "string_type"},
      {"prefill_tokens_in_flight",
       {-3, 0},
       {"body", "prefill_tokens_in_flight", 0},
       "greater_than_equal"},
      {"num_request_waiting", {0, 1, 2}, {"body", "num_request_waiting"}, "too_long"},
      {"num_request_running", {1}, {"body", "num_request_running"}, "too_short"},
  };
  for (const auto& c : cases) {
    Json bad = good;
    bad[c.field] = c.value;
    expect_422(post(bad.dump()), c.loc, c.type);
  }
  Json missing = good;
  missing.erase("num_tokens_generated");
  expect_422(post(missing.dump()), {"body", "num_tokens_generated"}, "missing");
  Json empty = good;
  empty["kv_cache_percentage"] = Json::array();
  empty["num_request_waiting"] = Json::array();
  expect_422(post(empty.dump()), {"body", "kv_cache_percentage"}, "too_short");
  Json many = good;
  many["kv_cache_percentage"] = std::vector<double>(10001, 0.5);
  many["num_request_waiting"] = 0;
  expect_422(post(many.dump()), {"body", "kv_cache_percentage"}, "too_long");
  many["kv_cache_percentage"] = std::vector<double>(10000, 0.5);
  const auto max = post(many.dump());
  ASSERT_EQ(max.status, 200);
  EXPECT_EQ(Json::parse(max.body)["tpot_ms"].size(), 10000u);
  expect_422(post(R"({"kv_cache_percentage": [0.5, NaN]})"), Json(), "json_invalid");
  expect_422(post("[1, 2]"), {"body"}, "model_attributes_type");
  expect_422(
      post(R"({"kv_cache_percentage":)" + std::string(100, '[') + std::string(100, ']') + "}"),
      Json(), "json_invalid");
  EXPECT_EQ(predictor_->client->get("/predict/bulk/columnar").status, 405);
  EXPECT_EQ(post(good.dump()).status, 200);
}

TEST(PredictorAlone, NotReadyShapesThenOversizedBody) {
  TempDir dir;
  PredictorProcess p(dir.path(), free_port(), {"--max-body-bytes", "4096"});
  ASSERT_TRUE(p.started) << p.process->log();
  Json row = feature_row(0.3, 100, 0, 1, 0.0);
  auto single = p.post("/predict", row);
  EXPECT_EQ(single.status, 503);
  EXPECT_EQ(Json::parse(single.body)["detail"], "Models not ready");
  EXPECT_EQ(p.post("/predict/bulk/strict", Json{{"requests", {row}}}).status, 503);
  // The columnar path: validated first (422), then 503 like /predict/bulk/strict.
  const auto columnar = p.post("/predict/bulk/columnar", row);
  EXPECT_EQ(columnar.status, 503);
  EXPECT_EQ(Json::parse(columnar.body)["detail"], "Models not ready");
  EXPECT_EQ(p.post("/predict/bulk/columnar", Json{{"kv_cache_percentage", {0.5}}}).status, 422);
  auto loose = p.post("/predict/bulk", Json{{"requests", {row, row}}});
  ASSERT_EQ(loose.status, 200);
  Json l = Json::parse(loose.body);
  EXPECT_EQ(l["predictions"], Json::array({nullptr, nullptr}));
  ASSERT_EQ(l["errors"].size(), 2u);
  EXPECT_EQ(l["errors"][1]["index"], 1);
  EXPECT_EQ(l["errors"][1]["request"]["input_token_length"], 100);
  EXPECT_EQ(l["failed_predictions"], 2);
  EXPECT_EQ(p.client->get("/readyz").status, 503);
  EXPECT_EQ(Json::parse(p.client->get("/readyz").body)["detail"], "Models are not ready");
  EXPECT_EQ(p.client->post("/reload", "").status, 500);
  for (const char* path : {"/predict/bulk", "/predict/bulk/columnar"}) {
    auto big = p.client->post(path, std::string(8192, ' '));
    EXPECT_EQ(big.status, 413) << path;
    EXPECT_TRUE(Json::parse(big.body)["detail"].is_string()) << path;
  }
  http::HttpClient fresh("127.0.0.1", p.port);
  EXPECT_EQ(fresh.get("/healthz").status, 200);
}

TEST(PredictorResilience, KilledTrainerLeavesPredictorServingAndLocalModelsSurviveRestart) {
  TempDir tdir, pdir;
  auto trainer = std::make_unique<TrainerProcess>(
      tdir.path(), std::vector<std::string>{"--retraining-interval", "0.5"});
  ASSERT_TRUE(trainer->ready);
  ASSERT_EQ(trainer->post("/add_training_data_bulk", training_body(SyntheticLaw{}, 500, 2)).status,
            202);
  ASSERT_TRUE(wait_until(
      [&] { return trainer->get_json("/model/tpot/info")["version"].get<int64_t>() > 1; },
      std::chrono::seconds(60)));
  const uint16_t trainer_port = trainer->port;
  Json row = feature_row(0.5, 2000, 1, 10, 0.2);
  Json expected = Json::parse(trainer->post("/predict", row).body);
  Json before;
  {
    PredictorProcess p(pdir.path(), trainer_port);
    ASSERT_TRUE(p.started);
    ASSERT_TRUE(wait_until(
        [&] {
          return p.client->get("/status").status == 200 &&
                 p.get_json("/status")["model_versions"].value("tpot", 0) > 1 &&
                 p.get_json("/status")["model_versions"].value("ttft", 0) > 1;
        },
        std::chrono::seconds(30)))
        << p.process->log();
    trainer->process->kill_now();
    before = Json::parse(p.post("/predict", row).body);
    EXPECT_EQ(before["ttft_ms"], expected["ttft_ms"]);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // a few failed sync rounds
    auto again = p.post("/predict", row);
    ASSERT_EQ(again.status, 200);
    EXPECT_EQ(Json::parse(again.body)["ttft_ms"], before["ttft_ms"]);
    auto reload = p.client->post("/reload", "");
    ASSERT_EQ(reload.status, 200);
    EXPECT_EQ(Json::parse(reload.body)["synced"], false);
    EXPECT_EQ(p.get_json("/status")["is_ready"], true);
    EXPECT_NE(p.client->get("/metrics").body.find("llmd_predictor_model_sync_last_result 0"),
              std::string::npos);
  }
  // Trainer still down: a restarted predictor is ready from its local copies.
  PredictorProcess p(pdir.path(), trainer_port);
  ASSERT_TRUE(p.started);
  EXPECT_EQ(p.client->get("/readyz").status, 200) << p.process->log();
  EXPECT_EQ(Json::parse(p.post("/predict", row).body)["ttft_ms"], before["ttft_ms"]);
}

// A "trainer" that accepts connections and never answers them (nor reads them). close() drops
// every connection it holds and stops listening: the peer then sees EOF / connection refused.
class HangingServer {
 public:
  HangingServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
          ::listen(fd_, 64) == 0;
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) {
          return;  // the listener was shut down
        }
        std::lock_guard lock(mu_);
        held_.push_back(c);
      }
    });
  }
  ~HangingServer() { close(); }
  bool ok() const { return ok_; }
  uint16_t port() const { return port_; }
  std::size_t accepted() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  void close() {
    if (fd_ < 0) {
      return;
    }
    ::shutdown(fd_, SHUT_RDWR);  // wakes the blocked accept()
    thread_.join();
    ::close(fd_);
    fd_ = -1;
    std::lock_guard lock(mu_);
    for (int c : held_) {
      ::close(c);
    }
    held_.clear();
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<int> held_;  // guarded by mu_
};

// Model sync runs on the predictor's sync thread, never on a request-serving one. The trainer
// hangs (every sync call waits its full 30 s timeout), the predictor has one I/O thread, and a
// POST /reload waits for its forced sync: predictions are still answered, each within 5 s.
// (/reload used to sync on the I/O thread itself, which stalled every request behind it.)
TEST(PredictorResilience, ReloadAgainstAHangingTrainerDoesNotStallRequests) {
  TempDir dir;
  {
    // A cold-start trainer writes its default models: the predictor's local copies.
    TrainerProcess seed(dir.path(), {"--retraining-interval", "3600"});
    ASSERT_TRUE(seed.ready) << seed.process->log();
    ASSERT_EQ(seed.process->terminate(), 0);
  }
  HangingServer trainer;
  ASSERT_TRUE(trainer.ok());
  PredictorProcess p(
      dir.path(), trainer.port(),
      {"--workers", "1", "--model-sync-interval", "3600", "--model-sync-timeout", "30"});
  ASSERT_TRUE(p.started) << p.process->log();
  ASSERT_EQ(p.client->get("/readyz").status, 200) << "ready from its local copies";
  // The sync at start is now waiting on the hanging trainer.
  ASSERT_TRUE(wait_until([&] { return trainer.accepted() >= 1; }, std::chrono::seconds(10)));
  std::atomic<int> reload_status{-1};
  std::string reload_body;
  std::thread reload([&] {
    http::HttpClient c("127.0.0.1", p.port, std::chrono::seconds(120));
    auto r = c.post("/reload", "");
    reload_body = r.body;
    reload_status = r.status;
  });
  const Json row = feature_row(0.5, 100, 1, 10, 0.2);
  for (int i = 0; i < 5; ++i) {
    // Liveness bound: each call must be answered within 5 s (the client's timeout) while the
    // sync hangs for 30 s per call.
    http::HttpClient c("127.0.0.1", p.port, std::chrono::seconds(5));
    auto one = c.post("/predict", row.dump());
    EXPECT_EQ(one.status, 200) << one.error << one.body;
    auto bulk = c.post("/predict/bulk/strict", Json{{"requests", {row, row}}}.dump());
    EXPECT_EQ(bulk.status, 200) << bulk.error << bulk.body;
    EXPECT_EQ(c.get("/status").status, 200);
  }
  EXPECT_EQ(reload_status, -1) << "the forced sync cannot have ended: the trainer still hangs";
  // The trainer goes away: the hanging call fails, the forced sync runs (connection refused)
  // and the waiting /reload is answered: 200 (the predictor holds models), synced false.
  trainer.close();
  reload.join();
  EXPECT_EQ(reload_status, 200) << reload_body;
  if (reload_status == 200) {
    const Json r = Json::parse(reload_body);
    EXPECT_EQ(r["synced"], false);
    EXPECT_EQ(r["is_ready"], true);
    EXPECT_EQ(r["loaded"], true);
  }
  EXPECT_EQ(p.process->terminate(), 0);
}

// A trainer that comes back without its model state (empty or corrupt model directory) starts
// a new model generation and counts versions from 1 again: the predictors take its models
// within two sync rounds, although the versions they hold are higher or equal.
TEST(PredictorResilience, FollowsATrainerThatRestartedWithoutItsModels) {
  TempDir tdir, fresh_dir, pdir;
  const double interval_s = 2;
  auto trainer = std::make_unique<TrainerProcess>(
      tdir.path(), std::vector<std::string>{"--retraining-interval", "0.3"});
  ASSERT_TRUE(trainer->ready);
  ASSERT_EQ(trainer->post("/add_training_data_bulk", training_body(SyntheticLaw{}, 500, 2)).status,
            202);
  // A trained version (> 1), so that the reset goes backwards.
  ASSERT_TRUE(wait_until(
      [&] { return trainer->get_json("/model/ttft/info")["version"].get<int64_t>() > 1; },
      std::chrono::seconds(60)));
  const uint16_t trainer_port = trainer->port;
  PredictorProcess p(pdir.path(), trainer_port,
                     {"--model-sync-interval", std::to_string(interval_s)});
  ASSERT_TRUE(p.started);
  const Json old_generation = trainer->get_json("/model/ttft/info")["generation"];
  ASSERT_TRUE(old_generation.is_string() && !old_generation.get<std::string>().empty());
  ASSERT_TRUE(wait_until(
      [&] {
        Json s = p.get_json("/status");
        return s["model_versions"].value("ttft", 0) > 1 &&
               s["model_generations"].value("ttft", "") == old_generation;
      },
      std::chrono::seconds(30)))
      << p.process->log();
  trainer->process->kill_now();
  trainer.reset();

  // Successful sync rounds so far (llmd_predictor_model_sync_total{result="ok"}).
  auto ok_syncs = [&] {
    const std::string m = p.client->get("/metrics").body;
    const std::string key = "llmd_predictor_model_sync_total{result=\"ok\"} ";
    const auto at = m.find(key);
    return at == std::string::npos ? 0.0 : std::stod(m.substr(at + key.size()));
  };
  // Whether the predictor holds, after two successful sync rounds from now (the trainer is up),
  // the trainer's ttft and tpot files of `generation` at the given versions. Counted in sync
  // rounds rather than timed as two intervals: a loaded machine stretches the rounds, not their
  // number. The 60-s bound is a hang guard.
  auto follows = [&](const Json& generation, int64_t ttft_version, int64_t tpot_version) {
    const double from = ok_syncs();
    if (!wait_until([&] { return ok_syncs() >= from + 2; }, std::chrono::seconds(60))) {
      return ::testing::AssertionFailure() << "hang guard (60 s): fewer than two successful "
                                              "sync rounds; "
                                           << p.process->log();
    }
    const Json s = p.get_json("/status");
    if (s["model_versions"].value("ttft", 0) == ttft_version &&
        s["model_versions"].value("tpot", 0) == tpot_version &&
        s["model_generations"].value("ttft", "") == generation &&
        s["model_generations"].value("tpot", "") == generation) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "not within two sync rounds: " << s.dump();
  };

  // 1. An empty model directory: version 1 of a new generation.
  Json generation;
  {
    TrainerProcess again(fresh_dir.path(), {"--retraining-interval", "60"}, trainer_port);
    ASSERT_TRUE(again.ready);
    Json info = again.get_json("/model/ttft/info");
    ASSERT_EQ(info["version"], 1);
    generation = info["generation"];
    EXPECT_NE(generation, old_generation);
    EXPECT_EQ(again.get_json("/models/list")["models"]["tpot"]["generation"], generation);
    EXPECT_TRUE(follows(generation, 1, 1));
    Json row = feature_row(0.5, 2000, 1, 10, 0.2);
    EXPECT_EQ(Json::parse(p.post("/predict", row).body)["ttft_ms"],
              Json::parse(again.post("/predict", row).body)["ttft_ms"]);
    EXPECT_EQ(again.process->terminate(), 0);
  }
  // 2. A normal restart keeps the generation.
  {
    TrainerProcess again(fresh_dir.path(), {"--retraining-interval", "60"}, trainer_port);
    ASSERT_TRUE(again.ready);
    EXPECT_EQ(again.get_json("/model/ttft/info")["generation"], generation);
    EXPECT_EQ(again.process->terminate(), 0);
  }
  // 3. A corrupt TTFT model: a new generation again (TTFT a default at version 2). The TPOT
  // file loads unchanged at version 1, the version the predictor holds: it is taken as part of
  // the new generation.
  {
    std::ofstream(fresh_dir.file("ttft.ubj"), std::ios::trunc) << "not a model";
    TrainerProcess again(fresh_dir.path(), {"--retraining-interval", "60"}, trainer_port);
    ASSERT_TRUE(again.ready);
    const Json newer = again.get_json("/model/ttft/info")["generation"];
    EXPECT_NE(newer, generation);
    EXPECT_EQ(again.get_json("/model/tpot/info")["version"], 1);
    EXPECT_EQ(again.get_json("/model/ttft/info")["version"], 2);
    EXPECT_TRUE(follows(newer, 2, 1));
  }
}

}  // namespace
}  // namespace llmd::testing
