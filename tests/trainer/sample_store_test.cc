#include "trainer/sample_store.h"

#include <gtest/gtest.h>

#include "trainer/persistence.h"
#include "common/util/files.h"

namespace llmd::trainer {
namespace {

features::FeatureInput row(int64_t waiting, double kv, double prefix) {
  features::FeatureInput f;
  f.num_request_waiting = waiting;
  f.kv_cache_percentage = kv;
  f.prefix_cache_score = prefix;
  f.input_token_length = 100;
  return f;
}

TEST(Buckets, BoundariesMatchTheContract) {
  const std::pair<int64_t, int> waiting[] = {{0, 0}, {1, 1}, {2, 1}, {3, 2}, {5, 2},
                                             {6, 3}, {10, 3}, {11, 4}, {500, 4}};
  for (auto [w, b] : waiting) {
    EXPECT_EQ(queue_bucket(w), b) << w;
  }
  EXPECT_EQ(cache_bucket(0.0), 0);
  EXPECT_EQ(cache_bucket(0.0499), 0);
  EXPECT_EQ(cache_bucket(0.05), 1);
  EXPECT_EQ(cache_bucket(0.999), 19);
  EXPECT_EQ(cache_bucket(1.0), 19);
  EXPECT_EQ(prefix_bucket(0.0), 0);
  EXPECT_EQ(prefix_bucket(0.25), 1);
  EXPECT_EQ(prefix_bucket(0.74), 2);
  EXPECT_EQ(prefix_bucket(1.0), 3);
  EXPECT_EQ(BucketKey({4, 19, 3}).index(), kBucketCount - 1);
  EXPECT_EQ(BucketKey::from_index(BucketKey({2, 7, 1}).index()).name(), "queue_2_cache_7_prefix_1");
}

TEST(SampleStore, FifoWindowPerBucketAndTargetsApart) {
  SampleStoreConfig cfg;
  cfg.max_per_bucket = 3;
  cfg.test_ratio = 0.0;
  SampleStore s(cfg);
  for (int i = 1; i <= 5; ++i) {
    s.add(row(0, 0.1, 0.0), i, 0);  // TTFT only
  }
  s.add(row(0, 0.1, 0.0), 0, 7);    // TPOT only
  EXPECT_EQ(s.training_count(Target::kTtft), 3u);
  EXPECT_EQ(s.training_count(Target::kTpot), 1u);
  auto ttft = s.training_samples(Target::kTtft);
  ASSERT_EQ(ttft.size(), 3u);
  EXPECT_FLOAT_EQ(ttft.front().actual_ms, 3.0f);  // oldest two evicted
  EXPECT_FLOAT_EQ(ttft.back().actual_ms, 5.0f);
  EXPECT_EQ(s.generation(Target::kTtft), 5u);
}

TEST(SampleStore, HoldOutShareAndCap) {
  SampleStoreConfig cfg;
  cfg.test_ratio = 0.1;
  cfg.max_test_per_target = 1000;
  SampleStore s(cfg);
  for (int i = 0; i < 5000; ++i) {
    s.add(row(i % 12, (i % 100) / 100.0, (i % 7) / 7.0), 10, 10);
  }
  EXPECT_GT(s.test_count(Target::kTtft), 400u);
  EXPECT_LT(s.test_count(Target::kTtft), 600u);
  for (int i = 0; i < 20000; ++i) {
    s.add(row(i % 12, (i % 100) / 100.0, (i % 7) / 7.0), 10, 10);
  }
  EXPECT_EQ(s.test_count(Target::kTpot), 1000u);
  auto c = s.clear(true, false);
  EXPECT_GT(c.training[0], 0u);
  EXPECT_EQ(s.training_count(Target::kTtft), 0u);
  EXPECT_EQ(s.test_count(Target::kTtft), 1000u);
}

TEST(Snapshot, RoundTripKeepsOrderAndPlacement) {
  SampleStore a(SampleStoreConfig{});
  for (int i = 0; i < 300; ++i) {
    auto f = row(i % 13, (i % 20) / 20.0, (i % 4) / 4.0);
    f.pod_type = static_cast<features::PodType>(i % 4 - 1);
    f.prefill_tokens_in_flight = i;
    a.add(f, 1 + i, i % 3 == 0 ? 0 : 2 + i);
  }
  std::string bytes = encode_snapshot(a);
  SampleStore b(SampleStoreConfig{});
  auto r = decode_snapshot(bytes, b);
  ASSERT_TRUE(r.ok) << r.error;
  for (Target t : kTargets) {
    auto x = a.training_samples(t), y = b.training_samples(t);
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].actual_ms, y[i].actual_ms);
      EXPECT_EQ(x[i].features.pod_type, y[i].features.pod_type);
      EXPECT_EQ(x[i].features.prefill_tokens_in_flight, y[i].features.prefill_tokens_in_flight);
    }
    EXPECT_EQ(a.test_count(t), b.test_count(t));
  }
}

std::size_t total(const SampleStore& s) {
  std::size_t n = 0;
  for (Target t : kTargets) {
    n += s.training_count(t) + s.test_count(t);
  }
  return n;
}

// 10,000 one-target samples: blocks of 4096, 4096 and 1808 records.
SampleStore filled(int n) {
  SampleStoreConfig cfg;
  cfg.max_per_bucket = 100000;
  cfg.max_test_per_target = 100000;
  SampleStore a(cfg);
  for (int i = 0; i < n; ++i) {
    a.add(row(i % 12, (i % 20) / 20.0, (i % 4) / 4.0), 10 + i, 0);
  }
  return a;
}

SampleStore empty_store() {
  SampleStoreConfig cfg;
  cfg.max_per_bucket = 100000;
  cfg.max_test_per_target = 100000;
  return SampleStore(cfg);
}

// Decodes `bytes` (a snapshot, or a sample log when `log`) into a fresh store; checks that the
// count it reports is what the store holds.
SnapshotLoad load_into_fresh(const std::string& bytes, bool log) {
  SampleStore s = empty_store();
  auto r = log ? replay_sample_log(bytes, s) : decode_snapshot(bytes, s);
  EXPECT_EQ(total(s), r.samples);
  return r;
}

TEST(Snapshot, DamageKeepsEveryIntactBlockBeforeIt) {
  const std::string bytes = encode_snapshot(filled(10000));
  constexpr std::size_t kRecord = 87;  // bytes per record
  const std::size_t header = 12, block = 8 + kBlockRecords * kRecord;
  auto restore = [](const std::string& b) { return load_into_fresh(b, false); };
  auto whole = restore(bytes);
  EXPECT_TRUE(whole.ok && whole.complete) << whole.error;
  EXPECT_EQ(whole.samples, 10000u);
  // Cut in the middle of the second block: the first block is back.
  auto cut = restore(bytes.substr(0, header + block + block / 2));
  EXPECT_TRUE(cut.ok);
  EXPECT_FALSE(cut.complete);
  EXPECT_EQ(cut.samples, kBlockRecords);
  EXPECT_NE(cut.error.find("cut"), std::string::npos) << cut.error;
  // A flipped bit in the second block: the first block is back, nothing after the damage.
  std::string flipped = bytes;
  flipped[header + block + 100] ^= 1;
  auto damaged = restore(flipped);
  EXPECT_EQ(damaged.samples, kBlockRecords);
  EXPECT_NE(damaged.error.find("checksum"), std::string::npos) << damaged.error;
  // Only the end block missing: every record is back, and the loss of the end is reported.
  auto no_end = restore(bytes.substr(0, bytes.size() - 1));
  EXPECT_EQ(no_end.samples, 10000u);
  EXPECT_FALSE(no_end.complete);
  // Not a snapshot at all.
  for (const std::string& junk : {std::string(), std::string("hello world, not a snapshot"),
                                  bytes.substr(0, 10)}) {
    auto r = restore(junk);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.samples, 0u);
  }
  std::string huge_count = bytes;
  huge_count[header + 3] = '\x7f';
  EXPECT_EQ(restore(huge_count).samples, 0u);
}

TEST(SampleLog, ReplayStopsAtATornOrDamagedEntry) {
  SampleStore a = empty_store();
  std::vector<std::vector<SampleStore::Placement>> batches(3);
  for (int b = 0; b < 3; ++b) {
    for (int i = 0; i < 5; ++i) {
      a.add(row(b, 0.1 * i, 0.0), 100 * b + i + 1, 3, &batches[b]);
    }
  }
  std::string log = sample_log_header();
  std::vector<std::size_t> ends;
  for (const auto& batch : batches) {
    log += encode_log_entry(batch);
    ends.push_back(log.size());
  }
  auto replay = [](const std::string& bytes) { return load_into_fresh(bytes, true); };
  auto all = replay(log);
  EXPECT_TRUE(all.complete) << all.error;
  EXPECT_EQ(all.samples, 30u);  // 3 batches x 5 rows x 2 targets
  auto torn = replay(log.substr(0, ends[1] + 7));
  EXPECT_EQ(torn.samples, 20u);
  EXPECT_FALSE(torn.complete);
  std::string damaged = log;
  damaged[ends[0] + 20] ^= 0x10;
  EXPECT_EQ(replay(damaged).samples, 10u);
  EXPECT_FALSE(replay_sample_log("LLMDSNP2....", a).ok);
  EXPECT_EQ(encode_log_entry({}), "");
}

TEST(SampleLog, AppendsSurviveAndResetEmpties) {
  const std::string path = ::testing::TempDir() + "/llmd_sample_log_test.log";
  std::remove(path.c_str());
  SampleStore a = empty_store();
  std::vector<SampleStore::Placement> placed;
  a.add(row(1, 0.5, 0.5), 12, 4, &placed);
  {
    SampleLog log(path);
    log.append(encode_log_entry(placed));
  }
  {
    SampleLog again(path);  // reopened: appends after what is there
    again.append(encode_log_entry(placed));
    auto bytes = util::read_file(path);
    ASSERT_TRUE(bytes.has_value());
    SampleStore s = empty_store();
    EXPECT_EQ(replay_sample_log(*bytes, s).samples, 4u);
    again.reset();
    again.append(encode_log_entry(placed));
  }
  SampleStore s = empty_store();
  EXPECT_EQ(replay_sample_log(*util::read_file(path), s).samples, 2u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace llmd::trainer
