// End-to-end tests of the trainer's HTTP contract (predictor-api.md section 3) against the
// real binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/util/files.h"
#include "tests/e2e/trainer_fixture.h"

namespace llmd::testing {
namespace {

Json entry(double kv, int64_t input, int64_t waiting, int64_t running, double prefix, double ttft,
           double tpot) {
  Json e = feature_row(kv, input, waiting, running, prefix);
  e["actual_ttft_ms"] = ttft;
  e["actual_tpot_ms"] = tpot;
  return e;
}

class TrainerApi : public ::testing::Test {
 protected:
  void SetUp() override {
    // Everything goes to training (no random hold-out) so counts are exact.
    trainer_ = std::make_unique<TrainerProcess>(
        dir_.path(),
        std::vector<std::string>{"--test-train-ratio", "0", "--retraining-interval", "3600"});
    ASSERT_TRUE(trainer_->ready) << trainer_->process->log();
  }
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << trainer_->process->log();
    }
  }
  TempDir dir_;
  std::unique_ptr<TrainerProcess> trainer_;
};

TEST_F(TrainerApi, HealthReadyRootAndUnknownRoutes) {
  EXPECT_EQ(trainer_->get_json("/healthz"), (Json{{"status", "ok"}}));
  EXPECT_EQ(trainer_->get_json("/readyz"), (Json{{"status", "ready"}}));
  Json root = trainer_->get_json("/");
  EXPECT_EQ(root["model_type"], "xgboost");
  EXPECT_EQ(root["objective_type"], "quantile");
  EXPECT_DOUBLE_EQ(root["quantile"].get<double>(), 0.9);
  auto r = trainer_->get("/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Json::parse(r.body), (Json{{"detail", "Not Found"}}));
  r = trainer_->client->request("DELETE", "/healthz");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(Json::parse(r.body), (Json{{"detail", "Method Not Allowed"}}));
}

TEST_F(TrainerApi, ColdStartDefaultModelsPredictTenMs) {
  auto r = trainer_->post("/predict", feature_row(0.5, 100, 0, 1, 0.0));
  ASSERT_EQ(r.status, 200) << r.body;
  Json p = Json::parse(r.body);
  EXPECT_DOUBLE_EQ(p["ttft_ms"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(p["tpot_ms"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(p["ttft_uncertainty"].get<double>(), 1.0);
  EXPECT_EQ(p["ttft_prediction_bounds"], Json::array({8.0, 12.0}));
  EXPECT_TRUE(p["predicted_at"].get<std::string>().ends_with("Z"));
  EXPECT_EQ(p["objective_type"], "quantile");
}

TEST_F(TrainerApi, ModelInfoDownloadAndLiteralRoutes) {
  Json info = trainer_->get_json("/model/ttft/info");
  EXPECT_EQ(info["model_name"], "ttft");
  EXPECT_EQ(info["exists"], true);
  EXPECT_GE(info["version"].get<int64_t>(), 1);
  auto dl = trainer_->get("/model/ttft/download");
  ASSERT_EQ(dl.status, 200);
  EXPECT_EQ(dl.header("content-type"), "application/octet-stream");
  EXPECT_EQ(dl.body.size(), info["size_bytes"].get<std::size_t>());
  EXPECT_NE(dl.header("content-disposition").find("attachment"), std::string::npos);

  auto unknown = trainer_->get("/model/foo/info");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(Json::parse(unknown.body)["detail"], "Unknown model: foo");
  auto missing = trainer_->get("/model/ttft_gated/download");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Json::parse(missing.body)["detail"], "Model ttft_gated not found");
  auto scaler = trainer_->get("/model/ttft_scaler/info");
  EXPECT_EQ(Json::parse(scaler.body)["detail"], "Model ttft_scaler not found");

  // Literal route wins over /model/{name}/info.
  Json dinfo = trainer_->get_json("/model/download/info");
  EXPECT_EQ(dinfo["available_endpoints"]["trees"]["ttft_trees"], "/model/ttft/xgb/json");
  EXPECT_EQ(dinfo["model_status"]["ttft_model_ready"], true);
  Json list = trainer_->get_json("/models/list");
  for (const char* name :
       {"ttft", "tpot", "ttft_scaler", "tpot_scaler", "ttft_gated", "tpot_gated"}) {
    EXPECT_TRUE(list["models"].contains(name)) << name;
  }
  EXPECT_EQ(list["models"]["ttft"]["exists"], true);
  EXPECT_EQ(list["models"]["ttft_scaler"]["exists"], false);
  auto trees = trainer_->get("/model/ttft/xgb/json");
  ASSERT_EQ(trees.status, 200);
  EXPECT_TRUE(Json::parse(trees.body).is_array());
  // Clients check for the reference's importance (or coef) lines, cold start included.
  const std::string metrics = trainer_->get("/metrics").body;
  EXPECT_NE(metrics.find("ttft_importance{"), std::string::npos);
  EXPECT_NE(metrics.find("tpot_importance{"), std::string::npos);
}

TEST_F(TrainerApi, BulkIngestExactMessageAndEmptyList) {
  Json body = {
      {"entries", Json::array({entry(0.1, 10, 0, 1, 0.0, 20, 5), entry(0.2, 20, 1, 1, 0.5, 30, 0),
                               entry(0.3, 30, 2, 1, 0.9, 0, 7)})}};
  auto r = trainer_->post("/add_training_data_bulk", body);
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(Json::parse(r.body), (Json{{"message", "Accepted 3 training samples."}}));
  r = trainer_->post("/add_training_data_bulk", Json{{"entries", Json::array()}});
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(Json::parse(r.body)["message"], "Accepted 0 training samples.");
  Json s = trainer_->get_json("/data/status");
  // A target of 0 is "not observed": 2 TTFT and 2 TPOT samples.
  EXPECT_EQ(s["training_data"]["ttft_samples"], 2);
  EXPECT_EQ(s["training_data"]["tpot_samples"], 2);
  EXPECT_EQ(s["training_data"]["total_samples"], 4);
}

void expect_422(TrainerProcess& t, const std::string& path, const std::string& body,
                const std::string& type, const Json& loc) {
  auto r = t.client->post(path, body);
  ASSERT_EQ(r.status, 422) << body << " -> " << r.body;
  Json d = Json::parse(r.body)["detail"];
  ASSERT_TRUE(d.is_array()) << r.body;
  bool found = false;
  for (const auto& e : d) {
    EXPECT_TRUE(e.contains("msg") && e.contains("input") && e.contains("type"));
    if (e["type"] == type && (loc.is_null() || e["loc"] == loc)) {
      found = true;
    }
  }
  EXPECT_TRUE(found) << "expected " << type << " at " << loc.dump() << " in " << r.body;
}

TEST_F(TrainerApi, BadInputIs422WithDetailAndNothingIsAccepted) {
  Json good = entry(0.1, 10, 0, 1, 0.0, 20, 5);
  auto bulk = [&](Json bad) { return Json{{"entries", Json::array({good, bad})}}.dump(); };
  Json missing = good;
  missing.erase("kv_cache_percentage");
  expect_422(*trainer_, "/add_training_data_bulk", bulk(missing), "missing",
             Json::array({"body", "entries", 1, "kv_cache_percentage"}));
  Json wrong_type = good;
  wrong_type["input_token_length"] = "many";
  expect_422(*trainer_, "/add_training_data_bulk", bulk(wrong_type), "int_type",
             Json::array({"body", "entries", 1, "input_token_length"}));
  Json fractional = good;
  fractional["num_request_running"] = 0.5;
  expect_422(*trainer_, "/add_training_data_bulk", bulk(fractional), "int_from_float",
             Json::array({"body", "entries", 1, "num_request_running"}));
  Json out_of_range = good;
  out_of_range["prefix_cache_score"] = 1.5;
  expect_422(*trainer_, "/add_training_data_bulk", bulk(out_of_range), "less_than_equal",
             Json::array({"body", "entries", 1, "prefix_cache_score"}));
  Json negative = good;
  negative["actual_ttft_ms"] = -1;
  expect_422(*trainer_, "/add_training_data_bulk", bulk(negative), "greater_than_equal",
             Json::array({"body", "entries", 1, "actual_ttft_ms"}));
  // NaN and Infinity are not JSON; an overflowing literal is not finite.
  expect_422(*trainer_, "/add_training_data_bulk", R"({"entries":[{"kv_cache_percentage":NaN}]})",
             "json_invalid", Json());
  std::string inf = bulk(good);
  inf.replace(inf.find("\"actual_ttft_ms\":20.0"), 21, "\"actual_ttft_ms\":1e999");
  expect_422(*trainer_, "/add_training_data_bulk", inf, "finite_number", Json());
  expect_422(*trainer_, "/add_training_data_bulk", "{\"entries\": [", "json_invalid", Json());
  expect_422(*trainer_, "/add_training_data_bulk", "{}", "missing",
             Json::array({"body", "entries"}));
  expect_422(*trainer_, "/add_training_data_bulk", R"({"entries": 5})", "list_type",
             Json::array({"body", "entries"}));
  expect_422(*trainer_, "/predict", R"({"kv_cache_percentage": 0.5})", "missing",
             Json::array({"body", "input_token_length"}));
  expect_422(*trainer_, "/flush", R"({"flush_training_data": "yes"})", "bool_type",
             Json::array({"body", "flush_training_data"}));
  // Nothing of the rejected bulks was accepted.
  EXPECT_EQ(trainer_->get_json("/data/status")["training_data"]["total_samples"], 0);
}

// The bulk body is read while it is parsed (entries built one at a time); the rules that the
// whole-document reading applied to the list as a whole still hold: an over-long list gets only
// its too_long error (no per-entry ones), batch_id is read wherever it stands, and a body that
// is not an object gets the dictionary error.
TEST(TrainerApiStreaming, ListRulesHoldWhenEntriesAreReadWhileParsing) {
  TempDir dir;
  TrainerProcess t(dir.path(), {"--max-bulk-entries", "3", "--retraining-interval", "3600",
                                "--test-train-ratio", "0"});
  ASSERT_TRUE(t.ready) << t.process->log();
  Json good = entry(0.1, 10, 0, 1, 0.0, 20, 5);
  Json four = Json::array({good, Json{{"bad", 1}}, good, good});
  auto r = t.post("/add_training_data_bulk", Json{{"entries", four}});
  ASSERT_EQ(r.status, 422) << r.body;
  Json d = Json::parse(r.body)["detail"];
  ASSERT_EQ(d.size(), 1u) << r.body;
  EXPECT_EQ(d[0]["type"], "too_long");
  EXPECT_EQ(d[0]["loc"], Json::array({"body", "entries"}));
  EXPECT_EQ(d[0]["msg"], "List should have at most 3 items after validation, not 4");
  // Entry errors come before the batch_id error, wherever batch_id stands in the body.
  r = t.client->post("/add_training_data_bulk",
                     R"({"batch_id": 7, "entries": [{"kv_cache_percentage": 0.5}]})");
  ASSERT_EQ(r.status, 422) << r.body;
  d = Json::parse(r.body)["detail"];
  ASSERT_GE(d.size(), 2u) << r.body;
  EXPECT_EQ(d[0]["loc"][1], "entries");
  EXPECT_EQ(d.back()["loc"], Json::array({"body", "batch_id"}));
  EXPECT_EQ(d.back()["type"], "string_type");
  expect_422(t, "/add_training_data_bulk", R"([{"entries": []}])", "model_attributes_type",
             Json::array({"body"}));
  // batch_id before the list: read, and a repeat is acknowledged without a second ingest.
  const std::string body = "{\"batch_id\": \"s:1\", \"entries\": [" + good.dump() + "]}";
  r = t.client->post("/add_training_data_bulk", body);
  EXPECT_EQ(r.status, 202) << r.body;
  r = t.client->post("/add_training_data_bulk", body);
  EXPECT_EQ(r.status, 202) << r.body;
  EXPECT_EQ(Json::parse(r.body).value("duplicate", false), true) << r.body;
  EXPECT_EQ(t.get_json("/data/status")["training_data"]["ttft_samples"], 1);
}

TEST_F(TrainerApi, OversizedBodyIs413AndServerKeepsServing) {
  TempDir dir;
  TrainerProcess small(dir.path(), {"--max-body-bytes", "2048"});
  ASSERT_TRUE(small.ready) << small.process->log();
  std::string big(4096, ' ');
  big = "{\"entries\":[]" + big + "}";
  auto r = small.client->post("/add_training_data_bulk", big);
  EXPECT_EQ(r.status, 413);
  EXPECT_TRUE(Json::parse(r.body)["detail"].is_string());
  http::HttpClient fresh("127.0.0.1", small.port);
  EXPECT_EQ(fresh.get("/healthz").status, 200);
}

TEST_F(TrainerApi, FlushSemantics) {
  Json entries = Json::array();
  for (int i = 0; i < 10; ++i) {
    entries.push_back(entry(0.1, 10 + i, 0, 1, 0.0, 20, 5));
  }
  ASSERT_EQ(trainer_->post("/add_training_data_bulk", Json{{"entries", entries}}).status, 202);
  // Partial flush: test data only -> training untouched.
  auto r = trainer_->post(
      "/flush",
      Json{{"flush_training_data", false}, {"flush_metrics", false}, {"reason", "rotate"}});
  ASSERT_EQ(r.status, 200) << r.body;
  Json f = Json::parse(r.body);
  EXPECT_EQ(f["success"], true);
  EXPECT_EQ(f["reason"], "rotate");
  EXPECT_EQ(f["ttft_training_samples_flushed"], 0);
  EXPECT_EQ(f["metrics_cleared"], false);
  EXPECT_EQ(trainer_->get_json("/data/status")["training_data"]["ttft_samples"], 10);
  Json nothing = Json::parse(trainer_
                                 ->post("/flush", Json{{"flush_training_data", false},
                                                       {"flush_test_data", false},
                                                       {"flush_metrics", false}})
                                 .body);
  EXPECT_EQ(nothing["message"], "No data flushed");
  // No body = flush everything; visible to the very next /data/status.
  r = trainer_->client->request("POST", "/flush", "", "application/json");
  ASSERT_EQ(r.status, 200);
  f = Json::parse(r.body);
  EXPECT_EQ(f["ttft_training_samples_flushed"], 10);
  EXPECT_EQ(f["tpot_training_samples_flushed"], 10);
  EXPECT_EQ(f["metrics_cleared"], true);
  EXPECT_EQ(f["reason"], nullptr);
  EXPECT_TRUE(f["message"].get<std::string>().starts_with("Successfully flushed"));
  Json s = trainer_->get_json("/data/status");
  EXPECT_EQ(s["training_data"]["total_samples"], 0);
  // Flush never deletes models.
  EXPECT_EQ(trainer_->get("/model/ttft/info").status, 200);
}

TEST_F(TrainerApi, BucketAssignmentAtBoundaries) {
  Json entries = Json::array();
  const int64_t waiting[] = {0, 1, 2, 3, 5, 6, 10, 11};
  for (int64_t w : waiting) {
    entries.push_back(entry(1.0, 10, w, 1, 1.0, 20, 5));
  }
  entries.push_back(entry(0.0, 10, 0, 1, 0.0, 20, 5));
  entries.push_back(entry(0.05, 10, 0, 1, 0.25, 20, 5));
  entries.push_back(entry(0.999, 10, 0, 1, 0.74, 20, 5));
  ASSERT_EQ(trainer_->post("/add_training_data_bulk", Json{{"entries", entries}}).status, 202);
  Json d = trainer_->get_json("/data/status")["bucket_distribution"];
  EXPECT_EQ(d["queue_0_cache_19_prefix_3"], 1);  // kv 1.0 -> 19, prefix 1.0 -> 3
  EXPECT_EQ(d["queue_1_cache_19_prefix_3"], 2);  // waiting 1, 2
  EXPECT_EQ(d["queue_2_cache_19_prefix_3"], 2);  // 3, 5
  EXPECT_EQ(d["queue_3_cache_19_prefix_3"], 2);  // 6, 10
  EXPECT_EQ(d["queue_4_cache_19_prefix_3"], 1);  // 11
  EXPECT_EQ(d["queue_0_cache_0_prefix_0"], 1);
  EXPECT_EQ(d["queue_0_cache_1_prefix_1"], 1);   // kv 0.05 -> 1, prefix 0.25 -> 1
  EXPECT_EQ(d["queue_0_cache_19_prefix_2"], 1);  // kv 0.999 -> 19, prefix 0.74 -> 2
  EXPECT_EQ(d.size(), 8u);
  Json e = trainer_->get_json("/data/status")["ensemble"];
  EXPECT_EQ(e["ttft_noqueue_samples"], 4);
  EXPECT_EQ(e["ttft_queued_samples"], 7);
}

TEST_F(TrainerApi, MetricsHaveReferenceLinesAndOurOwn) {
  auto r = trainer_->get("/metrics");
  ASSERT_EQ(r.status, 200);
  for (const char* line : {"model_type{type=\"xgboost\"} 1", "objective_type{type=\"quantile\"} 1",
                           "model_quantile{} 0.9", "ensemble_mode{} 1", "ensemble_active{} 0",
                           "target_coverage_percent{} 90", "ttft_intercept{}",
                           "# TYPE llmd_trainer_model_version gauge"}) {
    EXPECT_NE(r.body.find(line), std::string::npos) << line;
  }
}

// Live error follows the central estimate when the EPP sends one (ours), the bound otherwise
// (the Go EPP); coverage always follows the bound.
TEST_F(TrainerApi, LiveErrorIsOfTheExpectedValueAndCoverageOfTheBound) {
  auto gauge = [&](const std::string& name) {
    const std::string body = trainer_->get("/metrics").body;
    const std::string key = name + "{target=\"ttft\"} ";
    auto at = body.find(key);
    return at == std::string::npos ? -1.0 : std::stod(body.substr(at + key.size()));
  };
  // Actual 100 ms, bound 150 (covers it, 50 % off), expected 110 (10 % off).
  Json e = entry(0.1, 100, 0, 1, 0.0, 100, 0);
  e["predicted_ttft_ms"] = 150.0;
  e["expected_ttft_ms"] = 110.0;
  ASSERT_EQ(trainer_->post("/add_training_data_bulk", Json{{"entries", {e}}}).status, 202);
  EXPECT_NEAR(gauge("llmd_trainer_live_prediction_ape_percent"), 10.0, 1e-6);
  EXPECT_NEAR(gauge("llmd_trainer_live_prediction_coverage_percent"), 100.0, 1e-6);
  // Without the estimate (a reference client): the bound's error, 0.98 * 10 + 0.02 * 50.
  e.erase("expected_ttft_ms");
  ASSERT_EQ(trainer_->post("/add_training_data_bulk", Json{{"entries", {e}}}).status, 202);
  EXPECT_NEAR(gauge("llmd_trainer_live_prediction_ape_percent"), 10.8, 1e-6);
  e["expected_ttft_ms"] = -1.0;
  EXPECT_EQ(trainer_->post("/add_training_data_bulk", Json{{"entries", {e}}}).status, 422)
      << "a negative estimate is an error, as a negative bound is";
}

}  // namespace
}  // namespace llmd::testing
