// Exactly-once ingestion through the real trainer (issue 30): an append refused for space
// leaves no trace and strands nothing; a damaged snapshot frame costs only its samples; a batch
// id is ingested once, also across restarts; model versions never go back within a lineage.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "common/util/files.h"
#include "tests/e2e/trainer_fixture.h"

namespace llmd::testing {
namespace {

const std::vector<std::string> kQuiet = {"--snapshot-interval", "3600", "--retraining-interval",
                                         "3600"};

// `n` entries with both targets observed (two samples each), rows offset by `offset`.
Json entries(int n, int offset, const std::string& batch_id = "") {
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
  Json body{{"entries", list}};
  if (!batch_id.empty()) {
    body["batch_id"] = batch_id;
  }
  return body;
}

int ttft_samples(TrainerProcess& t) {
  Json s = t.get_json("/data/status");
  return s["training_data"]["ttft_samples"].get<int>() + s["test_data"]["ttft_samples"].get<int>();
}

// One 100-entry request is one ~17.4 KB log entry. The limit lets 15 of them in and leaves about
// half of one: the 16th fails part-way, and small requests still fit after it.
constexpr int64_t kLogEntry = 16 + 2 + 4 + 200 * 87;
constexpr int64_t kFileLimit = 8 + 15 * kLogEntry + kLogEntry / 2;

TEST(Durability, AnAppendRefusedForSpaceLeavesNoTraceAndStrandsNothing) {
  TempDir dir;
  int acknowledged = 0;
  uint16_t port = 0;
  std::string refused_detail;
  int small_acks = 0;
  {
    TrainerProcess t(dir.path(), kQuiet, 0, kFileLimit);
    ASSERT_TRUE(t.ready) << t.process->log();
    port = t.port;
    for (int b = 0; b < 40 && refused_detail.empty(); ++b) {
      auto r = t.post("/add_training_data_bulk", entries(100, 100 * b));
      if (r.status == 202) {
        acknowledged += 100;
      } else {
        ASSERT_EQ(r.status, 503) << r.body;
        refused_detail = Json::parse(r.body)["detail"].get<std::string>();
        // The refused request is not in memory either: a retry would not double it.
        EXPECT_EQ(ttft_samples(t), acknowledged);
        // Its id was not remembered: the same id is not a duplicate later.
        EXPECT_EQ(t.post("/add_training_data_bulk", entries(100, 100 * b, "e2e:refused")).status,
                  503);
      }
    }
    ASSERT_FALSE(refused_detail.empty()) << "the file-size limit never refused an append";
    EXPECT_EQ(acknowledged, 1500);
    EXPECT_NE(refused_detail.find("File too large"), std::string::npos) << refused_detail;
    // Ingestion goes on in the space that is left, right behind the last good entry.
    for (int b = 0; b < 200; ++b) {
      auto r = t.post("/add_training_data_bulk", entries(1, 100000 + b));
      if (r.status != 202) {
        break;
      }
      ++small_acks;
    }
    EXPECT_GT(small_acks, 10);
    EXPECT_EQ(ttft_samples(t), acknowledged + small_acks);
    t.process->kill_now();
  }
  // Restarted with room: every acknowledged sample is back, the refused batch is not.
  TrainerProcess again(dir.path(), kQuiet, port);
  ASSERT_TRUE(again.ready);
  EXPECT_EQ(ttft_samples(again), acknowledged + small_acks) << again.process->log();
  auto retry = again.post("/add_training_data_bulk", entries(100, 0, "e2e:refused"));
  ASSERT_EQ(retry.status, 202);
  EXPECT_FALSE(Json::parse(retry.body).contains("duplicate"));
  EXPECT_EQ(ttft_samples(again), acknowledged + small_acks + 100);
}

TEST(Durability, AFlippedByteInTheFirstSnapshotBlockCostsOnlyThatBlock) {
  TempDir dir;
  {
    TrainerProcess t(dir.path(), kQuiet);
    ASSERT_TRUE(t.ready);
    Json body = entries(5000, 0);
    for (auto& e : body["entries"]) {
      e["actual_tpot_ms"] = 0.0;  // 5,000 TTFT samples: frames of 4,096 and 904
    }
    ASSERT_EQ(t.post("/add_training_data_bulk", body).status, 202);
    ASSERT_EQ(ttft_samples(t), 5000);
    ASSERT_EQ(t.process->terminate(), 0);  // final snapshot, empty log
  }
  const std::string snapshot = dir.file("training_samples.bin");
  auto bytes = util::read_file(snapshot);
  ASSERT_TRUE(bytes.has_value());
  (*bytes)[12 + 1000] ^= 0x20;  // inside the first frame
  util::write_file_atomic(snapshot, *bytes);
  TrainerProcess again(dir.path(), kQuiet);
  ASSERT_TRUE(again.ready);
  EXPECT_EQ(ttft_samples(again), 904);
  EXPECT_NE(again.process->log().find("4096 samples lost"), std::string::npos)
      << again.process->log();
}

TEST(Idempotency, ARepeatedBatchIdIsAcknowledgedAndIngestedOnceAlsoAfterRestarts) {
  TempDir dir;
  uint16_t port = 0;
  auto post = [](TrainerProcess& t, const std::string& id) {
    auto r = t.post("/add_training_data_bulk", entries(10, 0, id));
    EXPECT_EQ(r.status, 202) << r.body;
    Json body = Json::parse(r.body);
    EXPECT_EQ(body["message"], "Accepted 10 training samples.");
    return body.value("duplicate", false);
  };
  {
    TrainerProcess t(dir.path(), kQuiet);
    ASSERT_TRUE(t.ready);
    port = t.port;
    EXPECT_FALSE(post(t, "epp-1:1"));
    EXPECT_TRUE(post(t, "epp-1:1"));
    EXPECT_FALSE(post(t, "epp-1:2"));
    EXPECT_EQ(ttft_samples(t), 20);
    // Without an id nothing changes (the reference's clients).
    ASSERT_EQ(t.post("/add_training_data_bulk", entries(10, 0)).status, 202);
    ASSERT_EQ(t.post("/add_training_data_bulk", entries(10, 0)).status, 202);
    EXPECT_EQ(ttft_samples(t), 40);
    // A malformed id is a 422 and ingests nothing.
    Json bad = entries(10, 0);
    bad["batch_id"] = 7;
    EXPECT_EQ(t.post("/add_training_data_bulk", bad).status, 422);
    bad["batch_id"] = std::string(129, 'x');
    EXPECT_EQ(t.post("/add_training_data_bulk", bad).status, 422);
    EXPECT_EQ(ttft_samples(t), 40);
    t.process->kill_now();  // the ids live in the sample log only
  }
  {
    TrainerProcess t(dir.path(), kQuiet, port);
    ASSERT_TRUE(t.ready);
    EXPECT_TRUE(post(t, "epp-1:1"));
    EXPECT_TRUE(post(t, "epp-1:2"));
    EXPECT_EQ(ttft_samples(t), 40);
    ASSERT_EQ(t.process->terminate(), 0);  // now in the snapshot, the log emptied
  }
  TrainerProcess t(dir.path(), kQuiet, port);
  ASSERT_TRUE(t.ready);
  EXPECT_TRUE(post(t, "epp-1:2"));
  EXPECT_FALSE(post(t, "epp-1:3"));
  EXPECT_EQ(ttft_samples(t), 50);
}

int64_t version(TrainerProcess& t) {
  return t.get_json("/model/ttft/info")["version"].get<int64_t>();
}

// Polls (bounded) until the trainer published a version above `v`.
bool wait_version_above(TrainerProcess& t, int64_t v) {
  for (int i = 0; i < 600; ++i) {
    if (version(t) > v) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

TEST(Lineage, ModelVersionsNeverGoBackWhenModelFilesAreOlderThanWhatWasServed) {
  TempDir dir;
  const std::vector<std::string> args = {"--snapshot-interval",
                                         "3600",
                                         "--retraining-interval",
                                         "1",
                                         "--min-samples-for-ensemble-split",
                                         "1000000",
                                         "--n-estimators",
                                         "10"};
  int64_t served = 0;
  std::string generation;
  std::optional<std::string> old_ttft, old_tpot;
  {
    TrainerProcess t(dir.path(), args);
    ASSERT_TRUE(t.ready);
    ASSERT_EQ(t.post("/add_training_data_bulk", entries(300, 0)).status, 202);
    ASSERT_TRUE(wait_version_above(t, 1));
    // The files of this version: what a later write refused by a full disk leaves behind.
    old_ttft = util::read_file(dir.file("ttft.ubj"));
    old_tpot = util::read_file(dir.file("tpot.ubj"));
    const int64_t v = version(t);
    ASSERT_EQ(t.post("/add_training_data_bulk", entries(300, 300)).status, 202);
    ASSERT_TRUE(wait_version_above(t, v));
    served = version(t);
    generation = t.get_json("/model/ttft/info")["generation"].get<std::string>();
    ASSERT_EQ(t.process->terminate(), 0);
  }
  ASSERT_TRUE(old_ttft && old_tpot);
  util::write_file_atomic(dir.file("ttft.ubj"), *old_ttft);
  util::write_file_atomic(dir.file("tpot.ubj"), *old_tpot);
  TrainerProcess again(dir.path(),
                       {"--snapshot-interval", "3600", "--retraining-interval", "3600"});
  ASSERT_TRUE(again.ready);
  EXPECT_EQ(again.get_json("/model/ttft/info")["generation"], generation);
  EXPECT_GT(version(again), served) << again.process->log();
  EXPECT_GT(again.get_json("/model/tpot/info")["version"].get<int64_t>(), served);
}

}  // namespace
}  // namespace llmd::testing
