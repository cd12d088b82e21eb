#pragma once
// The trainer's durable samples: a snapshot of the whole store plus an append-only log of what
// was added since, so that every sample acknowledged with 202 survives a crash (kill -9, OOM,
// power loss after the fsync).
//
// Snapshot (written atomically: temp + fsync + rename), little-endian:
//   "LLMDSNP2" | u32 format=2 | blocks... | end block
//   block: u32 count (1..kBlockRecords) | count x record | u32 crc32(count + records)
//   end block: u32 0 | u32 crc32(the 4 zero bytes)
// Each block carries its own checksum, so a snapshot cut or damaged in the middle still gives
// back every record before the damage (reported, not silent). Format 1 files (one CRC over the
// whole file, all or nothing) are still read.
//
// Sample log ("LLMDLOG1" header), appended and fsynced once per ingestion request before the
// 202: entry = u32 count | count x record | u32 crc32(count + records). A torn or damaged entry
// ends the replay there (a crash during the append leaves exactly such a tail).
//
// record: u8 target | u8 test | f32 actual_ms | f64 kv | i64 input | i64 waiting | i64 running
//         | i64 generated | f64 prefix | i8 pod_type | i64 prefill_inflight | i64 decode_inflight
//         | i64 encoder_matched | i64 encoder_input
#include <cstddef>
#include <string>
#include <vector>

#include "trainer/sample_store.h"

namespace llmd::trainer {

inline constexpr std::size_t kBlockRecords = 4096;

std::string encode_snapshot(const SampleStore& store);

struct SnapshotLoad {
  bool ok = false;          // the file was a snapshot and (some of) it was restored
  bool complete = false;    // every record it announced was intact
  std::size_t samples = 0;  // records restored
  std::string error;        // why it was skipped, or where it stopped
};
// Restores every intact block into `store` (format 2) or the whole file (format 1).
SnapshotLoad decode_snapshot(const std::string& bytes, SampleStore& store);

// The sample log's file header, and one log entry for `placed` (empty input -> empty string).
std::string sample_log_header();
std::string encode_log_entry(const std::vector<SampleStore::Placement>& placed);
// Replays a sample log into `store`; stops at the first torn or damaged entry.
SnapshotLoad replay_sample_log(const std::string& bytes, SampleStore& store);

// An append-only file: open (created with the header when missing), append + fdatasync, reset
// to just the header. Not thread-safe: the owner serialises calls.
class SampleLog {
 public:
  explicit SampleLog(std::string path);
  ~SampleLog();
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;
  // Throws std::runtime_error when the data is not on disk.
  void append(const std::string& entry);
  void reset();  // the snapshot now holds everything: start an empty log
  const std::string& path() const { return path_; }

 private:
  void open_fresh();
  std::string path_;
  int fd_ = -1;
};

}  // namespace llmd::trainer
