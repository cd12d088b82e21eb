#pragma once
// The trainer's durable samples: a snapshot of the whole store plus an append-only log of what
// was added since, so that every sample acknowledged with 202 survives a crash (kill -9, OOM,
// power loss after the fsync), and a damaged byte costs only the frame it sits in.
//
// Both files are a header followed by frames (little-endian):
//   frame: u32 kFrameMagic | u32 kind | u32 payload_len | payload | u32 crc32(magic..payload)
// A reader that meets a torn or damaged frame scans forward to the next magic whose frame
// checks out (resynchronisation) and reports what it skipped, so damage in the middle never
// strands the intact frames after it.
//
// Snapshot ("LLMDSNP3" | u32 3), written atomically (temp + fsync + rename):
//   batch_ids frame: u32 n | n x (u16 len | id)           the BatchIdWindow, oldest first
//   samples frames:  u32 count (1..kBlockRecords) | count x record
//   end frame:       u64 records | u32 samples frames     (tells how much a damage cost)
// Sample log ("LLMDLOG2"), one frame per ingestion request, fsynced before the 202:
//   batch frame:     u16 id_len | id | u32 count | count x record
// A whole request is one frame with one CRC: replay restores all of it or none of it.
// Record layout: trainer/record_codec.h. Files of earlier formats are still read
// (persistence_legacy.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/batch_ids.h"
#include "trainer/sample_store.h"

namespace llmd::trainer {

inline constexpr std::size_t kBlockRecords = 4096;

std::string encode_snapshot(const SampleStore& store, const BatchIdWindow* batch_ids = nullptr);

struct SnapshotLoad {
  bool ok = false;                  // the file was a snapshot / log and (some of) it was restored
  bool complete = false;            // nothing was damaged, torn or missing
  std::size_t samples = 0;          // records restored
  std::size_t lost_samples = 0;     // records announced (snapshot end frame) but not restored,
                                    // or estimated from the bytes skipped when that is unknown
  std::size_t damaged_regions = 0;  // runs of bytes skipped while resynchronising
  std::size_t skipped_bytes = 0;
  std::size_t duplicate_batches = 0;  // log entries skipped: their batch id was already known
  std::string error;                  // why it was skipped, or what was damaged
};
// Restores every intact frame into `store` (and the batch ids into `batch_ids` when given).
SnapshotLoad decode_snapshot(const std::string& bytes, SampleStore& store,
                             BatchIdWindow* batch_ids = nullptr);

// The sample log's file header, and one log entry for one ingestion request (empty placements
// and no id -> empty string).
std::string sample_log_header();
std::string encode_log_entry(const std::vector<SampleStore::Placement>& placed,
                             std::string_view batch_id = {});
// Replays a sample log into `store`, skipping damaged entries and entries whose batch id
// `batch_ids` already knows (a crash between a snapshot and the log reset); adds the ids.
SnapshotLoad replay_sample_log(const std::string& bytes, SampleStore& store,
                               BatchIdWindow* batch_ids = nullptr);
bool is_current_sample_log(const std::string& bytes);  // "LLMDLOG2" header

// An append-only file: open (created with the header when missing), append + fdatasync, reset
// to just the header. A failed append (ENOSPC, EFBIG, EIO, short write) is cut back to the end
// of the last good entry, so the next append lands right after it and nothing acknowledged is
// stranded behind a torn entry. Not thread-safe: the owner serialises calls.
class SampleLog {
 public:
  explicit SampleLog(std::string path);
  ~SampleLog();
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;
  // Throws std::runtime_error naming the cause (e.g. "No space left on device") when the data
  // is not on disk; the file is then as before the call (or will be cut back on the next call).
  void append(const std::string& entry);
  void reset();  // the snapshot now holds everything: start an empty log
  const std::string& path() const { return path_; }
  uint64_t size() const { return good_size_; }

 private:
  void open_existing();
  void roll_back();
  std::string path_;
  int fd_ = -1;
  uint64_t good_size_ = 0;  // end of the last complete, synced entry
  bool dirty_ = false;      // bytes past good_size_ that a failed roll-back left
};

}  // namespace llmd::trainer
