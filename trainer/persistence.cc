#include "trainer/persistence.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "common/util/files.h"
#include "trainer/persistence_legacy.h"
#include "trainer/record_codec.h"

namespace llmd::trainer {
namespace {

using codec::kRecordSize;
using codec::put;
using codec::Reader;
using codec::Record;

constexpr char kSnapMagic[8] = {'L', 'L', 'M', 'D', 'S', 'N', 'P', '3'};
constexpr uint32_t kSnapFormat = 3;
constexpr char kLogMagic[8] = {'L', 'L', 'M', 'D', 'L', 'O', 'G', '2'};
// Not ASCII-only, so text and the small integers of a record rarely look like it.
constexpr char kFrameMagic[4] = {'\xF7', 'F', 'R', 'M'};
constexpr std::size_t kFrameOverhead = 16;
constexpr uint32_t kMaxPayload = 1u << 30;

enum Kind : uint32_t { kSamples = 1, kBatch = 2, kBatchIds = 3, kEnd = 4 };

std::size_t begin_frame(std::string& out, Kind kind) {
  const std::size_t start = out.size();
  out.append(kFrameMagic, 4);
  put<uint32_t>(out, kind);
  put<uint32_t>(out, 0);  // payload length, set by end_frame
  return start;
}

void end_frame(std::string& out, std::size_t start) {
  const auto len = static_cast<uint32_t>(out.size() - start - 12);
  std::memcpy(out.data() + start + 8, &len, 4);
  put<uint32_t>(out, codec::crc(out.data() + start, out.size() - start));
}

struct Frame {
  uint32_t kind = 0;
  std::string_view payload;
};

// Walks the intact frames of a buffer; a torn or damaged stretch is skipped up to the next
// magic whose frame checks out, and counted.
class FrameScanner {
 public:
  FrameScanner(std::string_view bytes, std::size_t pos) : bytes_(bytes), pos_(pos) {}

  bool next(Frame& f) {
    bool damaged = false;
    while (pos_ < bytes_.size()) {
      if (valid_at(pos_, f)) {
        damaged_regions += damaged ? 1 : 0;
        pos_ += kFrameOverhead + f.payload.size();
        return true;
      }
      damaged = true;
      std::size_t n = bytes_.find(std::string_view(kFrameMagic, 4), pos_ + 1);
      n = n == std::string_view::npos ? bytes_.size() : n;
      skipped_bytes += n - pos_;
      pos_ = n;
    }
    damaged_regions += damaged ? 1 : 0;
    return false;
  }

  std::size_t damaged_regions = 0;
  std::size_t skipped_bytes = 0;

 private:
  bool valid_at(std::size_t pos, Frame& f) const {
    const std::size_t left = bytes_.size() - pos;
    if (left < kFrameOverhead || std::memcmp(bytes_.data() + pos, kFrameMagic, 4) != 0) {
      return false;
    }
    uint32_t kind, len, stored;
    std::memcpy(&kind, bytes_.data() + pos + 4, 4);
    std::memcpy(&len, bytes_.data() + pos + 8, 4);
    if (len > kMaxPayload || len > left - kFrameOverhead) {
      return false;
    }
    std::memcpy(&stored, bytes_.data() + pos + 12 + len, 4);
    if (stored != codec::crc(bytes_.data() + pos, 12 + len)) {
      return false;
    }
    f.kind = kind;
    f.payload = bytes_.substr(pos + 12, len);
    return true;
  }

  std::string_view bytes_;
  std::size_t pos_;
};

// u32 count | count x record, exactly filling `p` from `pos`; false when it does not parse.
bool read_records(std::string_view p, std::size_t pos, std::vector<Record>& out) {
  out.clear();
  if (p.size() < pos + 4) {
    return false;
  }
  uint32_t count;
  std::memcpy(&count, p.data() + pos, 4);
  if (p.size() - pos - 4 != std::size_t{count} * kRecordSize) {
    return false;
  }
  Reader r(p, pos + 4);
  out.resize(count);
  for (auto& rec : out) {
    if (!codec::get_record(r, rec)) {
      return false;
    }
  }
  return true;
}

void put_records(std::string& out, const SampleStore::Placement* placed, std::size_t n) {
  put<uint32_t>(out, static_cast<uint32_t>(n));
  for (std::size_t i = 0; i < n; ++i) {
    codec::put_record(out, placed[i].target, placed[i].test, placed[i].sample);
  }
}

void describe_damage(SnapshotLoad& r, const FrameScanner& sc, std::size_t bad_frames,
                     const char* what) {
  r.damaged_regions = sc.damaged_regions + bad_frames;
  r.skipped_bytes = sc.skipped_bytes;
  if (r.damaged_regions > 0 || r.lost_samples > 0) {
    r.error = fmt::format("{}: {} damaged region(s), {} bytes skipped, {} samples lost", what,
                          r.damaged_regions, r.skipped_bytes, r.lost_samples);
  }
}

}  // namespace

std::string encode_snapshot(const SampleStore& store, const BatchIdWindow* batch_ids) {
  std::vector<SampleStore::Placement> records;
  for (Target t : kTargets) {
    for (const auto& s : store.training_samples(t)) {
      records.push_back({t, false, s});
    }
    for (const auto& s : store.test_samples(t)) {
      records.push_back({t, true, s});
    }
  }
  std::string out;
  out.reserve(64 + records.size() * kRecordSize +
              (records.size() / kBlockRecords + 1) * (kFrameOverhead + 4));
  out.append(kSnapMagic, sizeof(kSnapMagic));
  put<uint32_t>(out, kSnapFormat);
  if (batch_ids != nullptr && batch_ids->size() > 0) {
    const std::size_t f = begin_frame(out, kBatchIds);
    put<uint32_t>(out, static_cast<uint32_t>(batch_ids->size()));
    for (const auto& id : batch_ids->ids()) {
      put<uint16_t>(out, static_cast<uint16_t>(id.size()));
      out.append(id);
    }
    end_frame(out, f);
  }
  uint32_t frames = 0;
  for (std::size_t i = 0; i < records.size(); i += kBlockRecords, ++frames) {
    const std::size_t f = begin_frame(out, kSamples);
    put_records(out, records.data() + i, std::min(kBlockRecords, records.size() - i));
    end_frame(out, f);
  }
  const std::size_t f = begin_frame(out, kEnd);
  put<uint64_t>(out, records.size());
  put<uint32_t>(out, frames);
  end_frame(out, f);
  return out;
}

SnapshotLoad decode_snapshot(const std::string& bytes, SampleStore& store,
                             BatchIdWindow* batch_ids) {
  if (legacy::is_snapshot(bytes)) {
    return legacy::decode_snapshot(bytes, store);
  }
  SnapshotLoad result;
  uint32_t format = 0;
  if (bytes.size() < 12 || std::memcmp(bytes.data(), kSnapMagic, 8) != 0 ||
      (std::memcpy(&format, bytes.data() + 8, 4), format != kSnapFormat)) {
    result.error = "not a sample snapshot (bad magic, format or too short)";
    return result;
  }
  result.ok = true;
  FrameScanner sc(bytes, 12);
  Frame f;
  std::vector<Record> records;
  std::size_t bad_frames = 0;
  bool end_seen = false;
  uint64_t announced = 0;
  while (sc.next(f)) {
    if (f.kind == kSamples) {
      if (!read_records(f.payload, 0, records)) {
        ++bad_frames;  // checksum right, values wrong: a writer bug, not a disk error
        continue;
      }
      for (const auto& rec : records) {
        store.restore(rec.target, rec.test, rec.sample);
      }
      result.samples += records.size();
    } else if (f.kind == kBatchIds && batch_ids != nullptr) {
      Reader r(f.payload, 0);
      const uint32_t n = f.payload.size() >= 4 ? r.get<uint32_t>() : 0;
      for (uint32_t i = 0; i < n && r.pos() + 2 <= f.payload.size(); ++i) {
        const uint16_t len = r.get<uint16_t>();
        if (r.pos() + len > f.payload.size()) {
          break;
        }
        batch_ids->add(std::string(f.payload.substr(r.pos(), len)));
        r.skip(len);
      }
    } else if (f.kind == kEnd && f.payload.size() >= 8) {
      std::memcpy(&announced, f.payload.data(), 8);
      end_seen = true;
    }
  }
  if (end_seen) {
    result.lost_samples = announced > result.samples ? announced - result.samples : 0;
  } else {
    result.lost_samples = sc.skipped_bytes / kRecordSize;  // an estimate: the count was lost
  }
  describe_damage(result, sc, bad_frames, end_seen ? "snapshot" : "snapshot (end missing)");
  result.complete = end_seen && result.damaged_regions == 0 && result.lost_samples == 0;
  if (!end_seen && result.error.empty()) {
    result.error = "snapshot: end frame missing";
  }
  return result;
}

std::string sample_log_header() {
  return std::string(kLogMagic, sizeof(kLogMagic));
}

bool is_current_sample_log(const std::string& bytes) {
  return bytes.size() >= sizeof(kLogMagic) && std::memcmp(bytes.data(), kLogMagic, 8) == 0;
}

std::string encode_log_entry(const std::vector<SampleStore::Placement>& placed,
                             std::string_view batch_id) {
  std::string out;
  if (placed.empty() && batch_id.empty()) {
    return out;
  }
  batch_id = batch_id.substr(0, kMaxBatchIdBytes);
  out.reserve(kFrameOverhead + 6 + batch_id.size() + placed.size() * kRecordSize);
  const std::size_t f = begin_frame(out, kBatch);
  put<uint16_t>(out, static_cast<uint16_t>(batch_id.size()));
  out.append(batch_id);
  put_records(out, placed.data(), placed.size());
  end_frame(out, f);
  return out;
}

SnapshotLoad replay_sample_log(const std::string& bytes, SampleStore& store,
                               BatchIdWindow* batch_ids) {
  if (legacy::is_log(bytes)) {
    return legacy::replay_log(bytes, store);
  }
  SnapshotLoad result;
  if (!is_current_sample_log(bytes)) {
    result.error = "not a sample log (bad magic)";
    return result;
  }
  result.ok = true;
  FrameScanner sc(bytes, sizeof(kLogMagic));
  Frame f;
  std::vector<Record> records;
  std::size_t bad_frames = 0;
  while (sc.next(f)) {
    if (f.kind != kBatch) {
      continue;
    }
    uint16_t len = 0;
    if (f.payload.size() >= 2) {
      std::memcpy(&len, f.payload.data(), 2);
    }
    if (f.payload.size() < 2u + len || !read_records(f.payload, 2u + len, records)) {
      ++bad_frames;
      continue;
    }
    const std::string id(f.payload.substr(2, len));
    if (!id.empty() && batch_ids != nullptr && batch_ids->contains(id)) {
      ++result.duplicate_batches;
      continue;
    }
    for (const auto& rec : records) {
      store.restore(rec.target, rec.test, rec.sample);
    }
    result.samples += records.size();
    if (batch_ids != nullptr) {
      batch_ids->add(id);
    }
  }
  result.lost_samples = sc.skipped_bytes / kRecordSize;  // estimated: counts sit in the damage
  describe_damage(result, sc, bad_frames, "sample log");
  result.complete = result.damaged_regions == 0;
  return result;
}

SampleLog::SampleLog(std::string path) : path_(std::move(path)) {
  util::ensure_parent_dir(path_);
  open_existing();
}

SampleLog::~SampleLog() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

void SampleLog::open_existing() {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw std::runtime_error(
        fmt::format("cannot open sample log {}: {}", path_, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(
        fmt::format("cannot stat sample log {}: {}", path_, std::strerror(err)));
  }
  good_size_ = static_cast<uint64_t>(st.st_size);
  dirty_ = false;
  if (good_size_ == 0) {
    append(sample_log_header());
  }
}

void SampleLog::roll_back() {
  // O_APPEND writes go to the end of the file, so after this the next entry starts exactly
  // where the last good one ended. If even this fails, the next append retries it first.
  dirty_ = ::ftruncate(fd_, static_cast<off_t>(good_size_)) != 0;
}

void SampleLog::append(const std::string& entry) {
  if (fd_ < 0) {
    open_existing();  // a reset that could not reopen the file; throws while that persists
  }
  if (dirty_) {
    roll_back();
    if (dirty_) {
      throw std::runtime_error(
          fmt::format("sample log cannot be cut back to its last entry: {}", std::strerror(errno)));
    }
  }
  std::size_t done = 0;
  while (done < entry.size()) {
    const ssize_t n = ::write(fd_, entry.data() + done, entry.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      const int err = errno;
      roll_back();
      throw std::runtime_error(fmt::format("sample log write failed: {}", std::strerror(err)));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fdatasync(fd_) != 0) {
    const int err = errno;
    roll_back();
    throw std::runtime_error(fmt::format("sample log fdatasync failed: {}", std::strerror(err)));
  }
  good_size_ += entry.size();
}

void SampleLog::reset() {
  // A fresh file renamed over the old one (write_file_atomic): a crash leaves either the old
  // log (replayed on top of the new snapshot; its batch ids are in the snapshot, so those
  // entries are skipped) or the new one.
  util::write_file_atomic(path_, sample_log_header());
  ::close(fd_);
  fd_ = -1;
  open_existing();
}

}  // namespace llmd::trainer
