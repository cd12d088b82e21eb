// Inputs built to crash a server, sent to the real binaries: each gets a 4xx and the server
// keeps serving.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <thread>

#include "tests/common/http_test_util.h"

#include "common/util/files.h"
#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

std::string nested(std::size_t depth) {
  return std::string(depth, '[') + "1" + std::string(depth, ']');
}

TEST(Hardening, DeeplyNestedJsonIsRefusedByEveryServer) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  Stack stack(o);
  ASSERT_TRUE(stack.ready) << stack.logs();
  const std::string deep = nested(100000);  // ~200 KB
  http::HttpClient trainer("127.0.0.1", stack.trainer->port);
  auto t = trainer.post("/add_training_data_bulk", "{\"entries\": " + deep + "}");
  EXPECT_EQ(t.status, 422) << t.body.substr(0, 300);
  EXPECT_LT(t.body.size(), 1000u) << "the error does not echo the input";
  http::HttpClient predictor("127.0.0.1", stack.predictor_ports[0]);
  auto p = predictor.post("/predict/bulk/strict",
                          "{\"requests\": [{\"kv_cache_percentage\": " + deep + "}]}");
  EXPECT_EQ(p.status, 422) << p.body.substr(0, 300);
  http::HttpClient epp("127.0.0.1", stack.epp_port);
  Json ok = {{"model", stack.model}, {"prompt", "hello"}, {"max_tokens", 2}};
  std::string deep_prompt = ok.dump();
  deep_prompt.replace(deep_prompt.find("\"hello\""), 7, deep);
  auto e = epp.post("/v1/completions", deep_prompt);
  EXPECT_EQ(e.status, 400) << e.body.substr(0, 300);
  std::string deep_extra = ok.dump();
  deep_extra.insert(deep_extra.size() - 1, ",\"nvext\":{},\"extra\":" + deep);
  EXPECT_EQ(epp.post("/v1/completions", deep_extra).status, 400);
  // Wrong types in fields the EPP reads: a 400 that names the field, on a live connection.
  // (Booleans are read as vLLM reads them: "yes" and 1 are a stream, "maybe" and 2 are not.)
  for (const char* bad : {R"("stream": "maybe")", R"("stream": 2)", R"("max_tokens": "8")"}) {
    auto r = epp.post("/v1/completions",
                      "{\"model\": \"" + stack.model + "\", \"prompt\": \"hi\", " + bad + "}");
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
    EXPECT_NE(r.body.find("field '"), std::string::npos) << r.body;
  }
  auto part = epp.request("POST", "/v1/chat/completions",
                          "{\"model\": \"" + stack.model +
                              "\", \"messages\": [{\"role\": \"user\", \"content\": "
                              "[{\"type\": 5}]}]}");
  EXPECT_EQ(part.status, 400) << part.body;
  // Everyone is still up; 64 levels are still accepted where a field allows nesting.
  EXPECT_EQ(trainer.get("/healthz").status, 200);
  EXPECT_EQ(predictor.get("/healthz").status, 200);
  Json fine = ok;
  fine["extra"] = Json::parse(nested(60));
  EXPECT_EQ(epp.post("/v1/completions", fine.dump()).status, 200);
}

}  // namespace
}  // namespace llmd::testing

namespace llmd::testing {
namespace {

// The mutating endpoints need the admin token once one is configured; the EPP sends it with
// its feedback, so training goes on.
TEST(Hardening, AdminTokenGuardsMutatingEndpointsAndTheEppSendsIt) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  o.trainer_args = {"--admin-token", "s3cret"};
  o.epp_args = {"--admin-token", "s3cret"};
  Stack stack(o);
  ASSERT_TRUE(stack.ready) << stack.logs();
  http::HttpClient trainer("127.0.0.1", stack.trainer->port);
  const std::vector<http::Header> good = {{"Authorization", "Bearer s3cret"}};
  const std::vector<http::Header> bad = {{"Authorization", "Bearer s3cre7"}};
  auto flush = trainer.request("POST", "/flush", "{}", "application/json");
  EXPECT_EQ(flush.status, 401) << flush.body;
  EXPECT_EQ(flush.header("www-authenticate"), "Bearer");
  EXPECT_EQ(trainer.request("POST", "/flush", "{}", "application/json", bad).status, 401);
  EXPECT_EQ(trainer.post("/add_training_data_bulk", R"({"entries": []})").status, 401);
  EXPECT_EQ(trainer.get("/model/export").status, 401);
  // Reads stay open (predictors sync, dashboards scrape).
  EXPECT_EQ(trainer.get("/model/ttft/info").status, 200);
  EXPECT_EQ(trainer.get("/metrics").status, 200);
  http::HttpClient predictor("127.0.0.1", stack.predictor_ports[0]);
  EXPECT_EQ(predictor.post("/reload", "").status, 200) << "the predictor has no token here";
  // Feedback with the token is accepted: the trainer counts the EPP's samples.
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(stack.complete(words(20, "t" + std::to_string(i)), 4, true).status, 200);
  }
  int samples = 0;
  for (int i = 0; i < 50 && samples < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Json s = stack.trainer->get_json("/data/status");
    samples =
        s["training_data"]["ttft_samples"].get<int>() + s["test_data"]["ttft_samples"].get<int>();
  }
  EXPECT_EQ(samples, 10);
  EXPECT_EQ(trainer.request("POST", "/flush", "{}", "application/json", good).status, 200);
}

// 100,000 empty entries (300 KB) used to produce an 83 MB 422 and 1.6 GB of trainer RSS.
TEST(Hardening, InvalidBulkBodiesGetShortAnswers) {
  TempDir dir;
  TrainerProcess trainer(dir.path());
  ASSERT_TRUE(trainer.ready);
  std::string empties = "{\"entries\": [";
  for (int i = 0; i < 100000; ++i) {
    empties += i == 0 ? "{}" : ",{}";
  }
  empties += "]}";
  auto r = trainer.client->post("/add_training_data_bulk", empties);
  EXPECT_EQ(r.status, 422);
  EXPECT_LT(r.body.size(), 20000u) << r.body.substr(0, 500);
  EXPECT_NE(r.body.find("too_many_errors"), std::string::npos);
  EXPECT_EQ(trainer.get("/healthz").status, 200);
}

// Peak resident memory of a process (VmHWM), MiB.
double peak_rss_mib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      return std::stod(line.substr(6)) / 1024.0;  // kB
    }
  }
  return -1;
}

// The request-body budget of the sidecars' server core: bodies announced while the budget is
// held get 503 + Retry-After before they are read; once uploads end, requests are served again.
// Concurrent large bodies keep the trainer's peak memory under a stated bound (300 MiB).
TEST(Hardening, SidecarBodyBudgetRefusesUploadsBeyondItAndBoundsMemory) {
  TempDir dir;
  TrainerProcess trainer(dir.path(), {"--body-budget-bytes", "8000000"});
  ASSERT_TRUE(trainer.ready);
  const std::string head =
      "POST /add_training_data_bulk HTTP/1.1\r\nHost: t\r\n"
      "Content-Type: application/json\r\nContent-Length: 3000000\r\n\r\n";
  // Two uploads that announce 3 MB each and stall: 6 of the 8 MB are held.
  std::unique_ptr<http::testing::RawSocket> slow1, slow2;
  auto stall = [&] {
    slow1 = std::make_unique<http::testing::RawSocket>(trainer.port);
    slow2 = std::make_unique<http::testing::RawSocket>(trainer.port);
    slow1->send_all(head + "{\"entries\": [");
    slow2->send_all(head + "{\"entries\": [");
  };
  stall();
  auto refused = http::testing::answer_before_body(
      trainer.port, head, [&] { return slow1->answered() || slow2->answered(); }, stall);
  ASSERT_TRUE(refused.has_value()) << "hang guard: no upload was refused while 6 of 8 MB were held";
  EXPECT_EQ(refused->rfind("HTTP/1.1 503", 0), 0u) << *refused;
  EXPECT_NE(refused->find("Retry-After: 1"), std::string::npos) << *refused;
  EXPECT_NE(refused->find("\"detail\""), std::string::npos) << *refused;
  // The stalled uploads go away: their share of the budget comes back.
  slow1->close();
  slow2->close();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Several large (invalid) bodies at once: each is answered, the trainer stays up and small.
  std::string big = "{\"entries\": [";
  for (int i = 0; big.size() < 2500000; ++i) {
    big += (i == 0 ? "" : ",") + std::string("{\"kv_cache_percentage\": 0.5}");
  }
  big += "]}";
  std::vector<std::thread> senders;
  std::atomic<int> answered{0};
  for (int i = 0; i < 6; ++i) {
    senders.emplace_back([&] {
      http::HttpClient c("127.0.0.1", trainer.port, std::chrono::seconds(60));
      const int status = c.post("/add_training_data_bulk", big).status;
      answered += status == 422 || status == 503 ? 1 : 0;
    });
  }
  for (auto& t : senders) {
    t.join();
  }
  EXPECT_EQ(answered, 6) << "every upload gets its 422 (invalid entries) or 503 (budget)";
  EXPECT_EQ(trainer.get("/healthz").status, 200);
  const double peak = peak_rss_mib(trainer.process->pid());
  RecordProperty("trainer_peak_rss_mib", std::to_string(peak));
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, 300.0) << "peak RSS MiB with six 2.5-MB invalid uploads at once";
}

// The predictor under several large bodies at once, with its default body budget (256 MiB,
// which admits all of them): eight 14-MB bulk bodies over the row cap (60,000+ rows; used to
// build a 10x document each before the 422) and eight valid 10,000-row bulk requests. Every
// request is answered, the predictor stays up, and its peak RSS stays under 300 MiB
// (docs/operator-guide.md, "Memory bounds").
TEST(Hardening, PredictorBoundsMemoryUnderConcurrentLargeBodies) {
  TempDir dir;
  TrainerProcess trainer(dir.path() + "/t", {"--retraining-interval", "3600"});
  ASSERT_TRUE(trainer.ready);
  const uint16_t port = free_port();
  Process p(binary("predictor/predictor"),
            {"--host", "127.0.0.1", "--port", std::to_string(port), "--workers", "2",
             "--training-server-url", "http://127.0.0.1:" + std::to_string(trainer.port),
             "--local-ttft-model-path", dir.file("ttft.ubj"), "--local-tpot-model-path",
             dir.file("tpot.ubj"), "--local-ttft-gated-model-path", dir.file("ttft_gated.bin"),
             "--local-tpot-gated-model-path", dir.file("tpot_gated.bin")});
  ASSERT_TRUE(p.wait_http_ok(port, "/readyz")) << p.log();
  const Json row = feature_row(0.5, 100, 1, 10, 0.2);
  const std::string row_text = row.dump();
  auto body_of = [&](std::size_t rows) {
    std::string b = "{\"requests\": [";
    for (std::size_t i = 0; i < rows; ++i) {
      if (i > 0) {
        b += ',';
      }
      b += row_text;
    }
    return b + "]}";
  };
  const std::string over_cap = body_of(14000000 / (row_text.size() + 1));
  const std::string bulk = body_of(10000);
  ASSERT_LT(over_cap.size(), 16u * 1024 * 1024) << "under the body limit: parsed, not 413";
  std::atomic<int> refused{0};
  std::atomic<int> predicted{0};
  std::vector<std::thread> senders;
  for (int i = 0; i < 8; ++i) {
    senders.emplace_back([&] {
      http::HttpClient c("127.0.0.1", port, std::chrono::seconds(60));
      auto r = c.post("/predict/bulk", over_cap);
      refused += r.status == 422 && r.body.find("too_long") != std::string::npos ? 1 : 0;
    });
    senders.emplace_back([&] {
      http::HttpClient c("127.0.0.1", port, std::chrono::seconds(60));
      auto r = c.post("/predict/bulk/strict", bulk);
      predicted +=
          r.status == 200 && r.body.find("\"successful_predictions\":10000") != std::string::npos
              ? 1
              : 0;
    });
  }
  for (auto& t : senders) {
    t.join();
  }
  EXPECT_EQ(refused, 8) << "422 too_long for every body over the row cap";
  EXPECT_EQ(predicted, 8) << "200 with 10,000 predictions for every valid bulk";
  http::HttpClient c("127.0.0.1", port);
  EXPECT_EQ(c.get("/healthz").status, 200);
  EXPECT_EQ(c.post("/predict", row_text).status, 200);
  const double peak = peak_rss_mib(p.pid());
  RecordProperty("predictor_peak_rss_mib", std::to_string(peak));
  std::cout << "predictor peak RSS: " << peak << " MiB\n";
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, 300.0) << "peak RSS MiB with eight 14-MB and eight 1.6-MB bodies at once";
}

TEST(Hardening, PredictorReloadNeedsItsToken) {
  TempDir dir;
  TrainerProcess trainer(dir.path() + "/t");
  ASSERT_TRUE(trainer.ready);
  const uint16_t port = free_port();
  Process p(binary("predictor/predictor"),
            {"--host", "127.0.0.1", "--port", std::to_string(port), "--training-server-url",
             "http://127.0.0.1:" + std::to_string(trainer.port), "--admin-token", "k",
             "--local-ttft-model-path", dir.file("ttft.ubj"), "--local-tpot-model-path",
             dir.file("tpot.ubj"), "--local-ttft-gated-model-path", dir.file("ttft_gated.bin"),
             "--local-tpot-gated-model-path", dir.file("tpot_gated.bin")});
  ASSERT_TRUE(p.wait_http_ok(port, "/healthz"));
  http::HttpClient c("127.0.0.1", port);
  EXPECT_EQ(c.post("/reload", "").status, 401);
  EXPECT_EQ(
      c.request("POST", "/reload", "", "application/json", {{"Authorization", "Bearer k"}}).status,
      200);
  // The scheme is case-insensitive (RFC 9110 section 11.1); the token is not.
  EXPECT_EQ(
      c.request("POST", "/reload", "", "application/json", {{"Authorization", "bearer k"}}).status,
      200);
  EXPECT_EQ(
      c.request("POST", "/reload", "", "application/json", {{"Authorization", "bearer K"}}).status,
      401);
}

}  // namespace
}  // namespace llmd::testing

namespace llmd::testing {
namespace {

// `n` valid entries spread over many buckets (no FIFO window evicts any of them).
Json entries(int n, int offset) {
  Json list = Json::array();
  for (int i = offset; i < offset + n; ++i) {
    list.push_back({{"kv_cache_percentage", (i % 20) / 20.0},
                    {"input_token_length", 100 + i % 50},
                    {"num_request_waiting", i % 10},
                    {"num_request_running", i % 7},
                    {"num_tokens_generated", 1 + i % 30},
                    {"prefix_cache_score", (i % 4) / 4.0},
                    {"actual_ttft_ms", 10.0 + i % 100},
                    {"actual_tpot_ms", 5.0 + i % 10}});
  }
  return Json{{"entries", list}};
}

int ttft_samples(TrainerProcess& t) {
  Json s = t.get_json("/data/status");
  return s["training_data"]["ttft_samples"].get<int>() + s["test_data"]["ttft_samples"].get<int>();
}

TEST(Durability, EveryAcknowledgedSampleSurvivesKill9) {
  TempDir dir;
  const std::vector<std::string> args = {"--snapshot-interval", "3600", "--retraining-interval",
                                         "3600"};
  int acknowledged = 0;
  uint16_t port = 0;
  std::string generation;
  {
    TrainerProcess t(dir.path(), args);
    ASSERT_TRUE(t.ready);
    port = t.port;
    for (int b = 0; b < 20; ++b) {
      if (t.post("/add_training_data_bulk", entries(50, 50 * b)).status == 202) {
        acknowledged += 50;
      }
    }
    ASSERT_EQ(ttft_samples(t), acknowledged);
    generation = t.get_json("/model/ttft/info")["generation"].get<std::string>();
    t.process->kill_now();  // no snapshot was ever written
  }
  EXPECT_EQ(acknowledged, 1000);
  TrainerProcess again(dir.path(), args, port);
  ASSERT_TRUE(again.ready);
  EXPECT_EQ(ttft_samples(again), acknowledged) << again.process->log();
  // Restarted with its model files: the same model lineage.
  EXPECT_FALSE(generation.empty());
  EXPECT_EQ(again.get_json("/model/ttft/info")["generation"], generation);
  // The replayed log was compacted into a snapshot: a second crash loses nothing either.
  again.process->kill_now();
  TrainerProcess third(dir.path(), args, port);
  ASSERT_TRUE(third.ready);
  EXPECT_EQ(ttft_samples(third), acknowledged);
}

TEST(Durability, ASnapshotCutInTheMiddleRestoresTheRecordsBeforeTheCut) {
  TempDir dir;
  const std::vector<std::string> args = {"--snapshot-interval", "3600", "--retraining-interval",
                                         "3600"};
  int before = 0;
  {
    TrainerProcess t(dir.path(), args);
    ASSERT_TRUE(t.ready);
    for (int b = 0; b < 10; ++b) {
      ASSERT_EQ(t.post("/add_training_data_bulk", entries(1000, 1000 * b)).status, 202);
    }
    before = ttft_samples(t);
    ASSERT_EQ(t.process->terminate(), 0);  // final snapshot, empty log
  }
  const std::string snapshot = dir.file("training_samples.bin");
  auto bytes = util::read_file(snapshot);
  ASSERT_TRUE(bytes.has_value());
  util::write_file_atomic(snapshot, bytes->substr(0, bytes->size() / 2));
  TrainerProcess again(dir.path(), args);
  ASSERT_TRUE(again.ready);
  const int restored = ttft_samples(again);
  EXPECT_GE(restored, 4096) << "the intact blocks before the cut";
  EXPECT_LT(restored, before);
  EXPECT_NE(again.process->log().find("samples lost"), std::string::npos);
}

}  // namespace
}  // namespace llmd::testing
