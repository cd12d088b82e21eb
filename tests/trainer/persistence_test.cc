// Snapshot and sample-log formats (trainer/persistence.h): damage anywhere costs only the frame
// it sits in, a failed append is cut back, batch ids survive a round trip, old formats still load.
#include "trainer/persistence.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include "common/util/files.h"
#include "tests/support/process.h"
#include "trainer/record_codec.h"

namespace llmd::trainer {
namespace {

constexpr std::size_t kHeader = 12;  // magic + format
constexpr std::size_t kFullFrame = 16 + 4 + kBlockRecords * codec::kRecordSize;

features::FeatureInput row(int64_t waiting, double kv, double prefix) {
  features::FeatureInput f;
  f.num_request_waiting = waiting;
  f.kv_cache_percentage = kv;
  f.prefix_cache_score = prefix;
  f.input_token_length = 100;
  return f;
}

SampleStoreConfig roomy() {
  SampleStoreConfig cfg;
  cfg.max_per_bucket = 100000;
  cfg.max_test_per_target = 100000;
  return cfg;
}

std::size_t total(const SampleStore& s) {
  std::size_t n = 0;
  for (Target t : kTargets) {
    n += s.training_count(t) + s.test_count(t);
  }
  return n;
}

// `n` one-target samples: frames of 4096, 4096 and n - 8192 records.
SampleStore filled(int n) {
  SampleStore a(roomy());
  for (int i = 0; i < n; ++i) {
    a.add(row(i % 12, (i % 20) / 20.0, (i % 4) / 4.0), 10 + i, 0);
  }
  return a;
}

// Decodes into a fresh store and checks that the count reported is what the store holds.
SnapshotLoad restore(const std::string& bytes, BatchIdWindow* ids = nullptr) {
  SampleStore s(roomy());
  auto r = decode_snapshot(bytes, s, ids);
  EXPECT_EQ(total(s), r.samples);
  return r;
}

TEST(Snapshot, DamageCostsOnlyTheFrameItIsIn) {
  const std::string bytes = encode_snapshot(filled(10000));
  auto whole = restore(bytes);
  EXPECT_TRUE(whole.ok && whole.complete) << whole.error;
  EXPECT_EQ(whole.samples, 10000u);
  EXPECT_EQ(whole.lost_samples, 0u);

  // One flipped byte in the FIRST frame: the two frames after it are back, the loss is exact.
  std::string first = bytes;
  first[kHeader + 5000] ^= 0x01;
  auto r1 = restore(first);
  EXPECT_TRUE(r1.ok);
  EXPECT_FALSE(r1.complete);
  EXPECT_EQ(r1.samples, 10000u - kBlockRecords);
  EXPECT_EQ(r1.lost_samples, kBlockRecords);
  EXPECT_EQ(r1.damaged_regions, 1u);
  EXPECT_NE(r1.error.find("4096 samples lost"), std::string::npos) << r1.error;

  // A damaged length field in the second frame: resynchronises on the third.
  std::string len = bytes;
  len[kHeader + kFullFrame + 10] = '\x7f';
  EXPECT_EQ(restore(len).samples, 10000u - kBlockRecords);

  // Cut in the middle of the second frame: the first is back, the loss estimated.
  auto cut = restore(bytes.substr(0, kHeader + kFullFrame + kFullFrame / 2));
  EXPECT_TRUE(cut.ok);
  EXPECT_FALSE(cut.complete);
  EXPECT_EQ(cut.samples, kBlockRecords);
  EXPECT_GT(cut.lost_samples, 1000u);

  // Only the end frame missing: every record, but not complete.
  auto no_end = restore(bytes.substr(0, bytes.size() - 1));
  EXPECT_EQ(no_end.samples, 10000u);
  EXPECT_FALSE(no_end.complete);

  // A stretch of zeros over the first two frames' boundary (a lost disk page).
  std::string zeros = bytes;
  std::fill(zeros.begin() + kHeader + kFullFrame - 2000,
            zeros.begin() + kHeader + kFullFrame + 2000, 0);
  EXPECT_EQ(restore(zeros).samples, 10000u - 2 * kBlockRecords);

  for (const std::string& junk :
       {std::string(), std::string("hello world, not a snapshot"), bytes.substr(0, 10)}) {
    auto r = restore(junk);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.samples, 0u);
  }
}

TEST(Snapshot, BatchIdsRoundTrip) {
  BatchIdWindow ids(100);
  for (int i = 0; i < 5; ++i) {
    ids.add("epp-a:" + std::to_string(i));
  }
  const std::string bytes = encode_snapshot(filled(10), &ids);
  BatchIdWindow back(100);
  auto r = restore(bytes, &back);
  EXPECT_TRUE(r.complete) << r.error;
  EXPECT_EQ(r.samples, 10u);
  ASSERT_EQ(back.size(), 5u);
  EXPECT_TRUE(back.contains("epp-a:0"));
  EXPECT_TRUE(back.contains("epp-a:4"));
  EXPECT_FALSE(back.contains("epp-a:5"));
}

TEST(Snapshot, Format2FilesStillLoad) {
  // Format 2 as earlier trainers wrote it: blocks u32 count | records | u32 crc, end block 0.
  std::string old("LLMDSNP2", 8);
  codec::put<uint32_t>(old, 2);
  auto block = [&old](int n) {
    const std::size_t start = old.size();
    codec::put<uint32_t>(old, static_cast<uint32_t>(n));
    for (int i = 0; i < n; ++i) {
      codec::put_record(old, Target::kTpot, false, Sample{row(1, 0.2, 0.3), 5.0f + i});
    }
    codec::put<uint32_t>(old, codec::crc(old.data() + start, old.size() - start));
  };
  block(7);
  block(0);
  auto r = restore(old);
  EXPECT_TRUE(r.ok && r.complete) << r.error;
  EXPECT_EQ(r.samples, 7u);
}

// Three requests of five rows with both targets: 10 samples each.
struct ThreeBatches {
  std::string log = sample_log_header();
  std::vector<std::size_t> ends;
  explicit ThreeBatches(bool with_ids) {
    SampleStore a(roomy());
    for (int b = 0; b < 3; ++b) {
      std::vector<SampleStore::Placement> placed;
      for (int i = 0; i < 5; ++i) {
        a.add(row(b, 0.1 * i, 0.0), 100 * b + i + 1, 3, &placed);
      }
      log += encode_log_entry(placed, with_ids ? "epp-a:" + std::to_string(b) : "");
      ends.push_back(log.size());
    }
  }
};

SnapshotLoad replay(const std::string& bytes, BatchIdWindow* ids = nullptr) {
  SampleStore s(roomy());
  auto r = replay_sample_log(bytes, s, ids);
  EXPECT_EQ(total(s), r.samples);
  return r;
}

TEST(SampleLog, ReplayResynchronisesAfterATornOrDamagedEntry) {
  ThreeBatches b(false);
  auto all = replay(b.log);
  EXPECT_TRUE(all.complete) << all.error;
  EXPECT_EQ(all.samples, 30u);
  // A torn tail (crash during an unacknowledged append).
  auto torn = replay(b.log.substr(0, b.ends[1] + 7));
  EXPECT_EQ(torn.samples, 20u);
  EXPECT_FALSE(torn.complete);
  // A torn entry in the middle (a failed append the next one was written after).
  const std::string middle = b.log.substr(0, b.ends[0] + 40) + b.log.substr(b.ends[1]);
  auto m = replay(middle);
  EXPECT_EQ(m.samples, 20u);
  EXPECT_EQ(m.damaged_regions, 1u);
  // A flipped byte in the first entry: that whole request is dropped, the others kept.
  std::string damaged = b.log;
  damaged[b.ends[0] - 30] ^= 0x10;
  EXPECT_EQ(replay(damaged).samples, 20u);
  EXPECT_FALSE(replay("LLMDSNP3....").ok);
  EXPECT_EQ(encode_log_entry({}), "");
}

TEST(SampleLog, EntriesWhoseBatchIdIsKnownAreSkipped) {
  ThreeBatches b(true);
  BatchIdWindow ids(10);
  ids.add("epp-a:1");  // already in the snapshot
  auto r = replay(b.log, &ids);
  EXPECT_EQ(r.samples, 20u);
  EXPECT_EQ(r.duplicate_batches, 1u);
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_TRUE(ids.contains("epp-a:0") && ids.contains("epp-a:2"));
  // An id-only entry (no samples) is still an entry: its id is remembered.
  BatchIdWindow only(10);
  EXPECT_EQ(replay(sample_log_header() + encode_log_entry({}, "x:1"), &only).samples, 0u);
  EXPECT_TRUE(only.contains("x:1"));
}

TEST(SampleLog, Log1FilesStillReplay) {
  std::string old("LLMDLOG1", 8);
  const std::size_t start = old.size();
  codec::put<uint32_t>(old, 2);
  codec::put_record(old, Target::kTtft, false, Sample{row(0, 0.1, 0.1), 4.0f});
  codec::put_record(old, Target::kTtft, true, Sample{row(0, 0.1, 0.1), 4.0f});
  codec::put<uint32_t>(old, codec::crc(old.data() + start, old.size() - start));
  EXPECT_EQ(replay(old).samples, 2u);
}

TEST(BatchIdWindow, ForgetsTheOldestBeyondItsCapacity) {
  BatchIdWindow w(3);
  for (const char* id : {"a", "b", "a", "c", "d", ""}) {
    w.add(id);
  }
  EXPECT_EQ(w.size(), 3u);
  EXPECT_FALSE(w.contains("a"));
  EXPECT_TRUE(w.contains("b") && w.contains("c") && w.contains("d"));
  EXPECT_FALSE(w.contains(""));
}

// A file-size limit makes the next append fail part-way (as ENOSPC does); the log is cut back,
// so the append after it lands right behind the last good entry and replay finds no damage.
TEST(SampleLog, AFailedAppendIsCutBackAndTheNextOneIsNotStranded) {
  testing::TempDir dir;
  const std::string path = dir.file("samples.log");
  ThreeBatches b(true);
  const std::string e0 = b.log.substr(8, b.ends[0] - 8);
  const std::string e1 = b.log.substr(b.ends[0], b.ends[1] - b.ends[0]);
  const std::string e2 = b.log.substr(b.ends[1]);
  SampleLog log(path);
  log.append(e0);
  const uint64_t good = log.size();

  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* old_handler = signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of a signal
  struct rlimit limited = saved;
  limited.rlim_cur = good + e1.size() / 2;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string error;
  try {
    log.append(e1);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, old_handler);
  EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  EXPECT_EQ(log.size(), good);
  EXPECT_EQ(util::read_file(path)->size(), good);  // nothing of the failed entry is left

  log.append(e2);  // space is back
  BatchIdWindow ids(10);
  auto r = replay(*util::read_file(path), &ids);
  EXPECT_TRUE(r.complete) << r.error;
  EXPECT_EQ(r.samples, 20u);
  EXPECT_FALSE(ids.contains("epp-a:1"));  // the refused request left no trace
  EXPECT_TRUE(ids.contains("epp-a:2"));
}

}  // namespace
}  // namespace llmd::trainer
