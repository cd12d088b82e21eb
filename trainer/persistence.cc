#include "trainer/persistence.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "common/util/files.h"

namespace llmd::trainer {
namespace {

constexpr char kMagic1[8] = {'L', 'L', 'M', 'D', 'S', 'N', 'P', '1'};
constexpr char kMagic2[8] = {'L', 'L', 'M', 'D', 'S', 'N', 'P', '2'};
constexpr uint32_t kFormat2 = 2;
constexpr char kLogMagic[8] = {'L', 'L', 'M', 'D', 'L', 'O', 'G', '1'};
constexpr std::size_t kRecordSize = 1 + 1 + 4 + 8 + 8 * 4 + 8 + 1 + 8 * 4;

template <typename T>
void put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

class Reader {
 public:
  Reader(const std::string& s, std::size_t pos) : s_(s), pos_(pos) {}
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::size_t pos() const { return pos_; }

 private:
  const std::string& s_;
  std::size_t pos_ = 0;
};

struct Record {
  Target target;
  bool test;
  Sample sample;
};

void put_record(std::string& out, Target t, bool test, const Sample& s) {
  const auto& f = s.features;
  put<uint8_t>(out, static_cast<uint8_t>(t));
  put<uint8_t>(out, test ? 1 : 0);
  put<float>(out, s.actual_ms);
  put<double>(out, f.kv_cache_percentage);
  put<int64_t>(out, f.input_token_length);
  put<int64_t>(out, f.num_request_waiting);
  put<int64_t>(out, f.num_request_running);
  put<int64_t>(out, f.num_tokens_generated);
  put<double>(out, f.prefix_cache_score);
  put<int8_t>(out, static_cast<int8_t>(f.pod_type));
  put<int64_t>(out, f.prefill_tokens_in_flight);
  put<int64_t>(out, f.decode_tokens_in_flight);
  put<int64_t>(out, f.encoder_matched_size);
  put<int64_t>(out, f.encoder_input_size);
}

uint32_t crc(const char* data, std::size_t n) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(n)));
}

// Reads one record at `r`; false when its values cannot be a sample.
bool get_record(Reader& r, Record& rec) {
  uint8_t t = r.get<uint8_t>();
  uint8_t test = r.get<uint8_t>();
  auto& f = rec.sample.features;
  rec.sample.actual_ms = r.get<float>();
  f.kv_cache_percentage = r.get<double>();
  f.input_token_length = r.get<int64_t>();
  f.num_request_waiting = r.get<int64_t>();
  f.num_request_running = r.get<int64_t>();
  f.num_tokens_generated = r.get<int64_t>();
  f.prefix_cache_score = r.get<double>();
  int8_t pod = r.get<int8_t>();
  f.prefill_tokens_in_flight = r.get<int64_t>();
  f.decode_tokens_in_flight = r.get<int64_t>();
  f.encoder_matched_size = r.get<int64_t>();
  f.encoder_input_size = r.get<int64_t>();
  if (t > 1 || test > 1 || pod < -1 || pod > 2 || !(rec.sample.actual_ms > 0)) {
    return false;
  }
  rec.target = static_cast<Target>(t);
  rec.test = test == 1;
  f.pod_type = static_cast<features::PodType>(pod);
  return true;
}

// A checksummed group of records: u32 count | records | u32 crc32(count + records).
void put_block(std::string& out, const Record* records, std::size_t n) {
  const std::size_t start = out.size();
  put<uint32_t>(out, static_cast<uint32_t>(n));
  for (std::size_t i = 0; i < n; ++i) {
    put_record(out, records[i].target, records[i].test, records[i].sample);
  }
  put<uint32_t>(out, crc(out.data() + start, out.size() - start));
}

// Restores the blocks of `bytes` from `pos` on into `store`, until the end block (complete) or
// the first torn or damaged block (an error naming it). Records of a damaged block are dropped
// whole: its checksum cannot tell which of them are intact.
SnapshotLoad restore_blocks(const std::string& bytes, std::size_t pos, SampleStore& store,
                            bool until_end_block, const char* what) {
  SnapshotLoad result;
  result.ok = true;
  std::size_t block = 0;
  std::vector<Record> records;
  while (true) {
    if (bytes.size() - pos == 0 && !until_end_block) {
      result.complete = true;
      return result;
    }
    if (bytes.size() - pos < 8) {
      result.error = fmt::format("{} cut after {} blocks ({} records)", what, block, result.samples);
      return result;
    }
    uint32_t count;
    std::memcpy(&count, bytes.data() + pos, 4);
    if (count > kBlockRecords || bytes.size() - pos < 8 + std::size_t{count} * kRecordSize) {
      result.error = fmt::format("{} cut or damaged in block {} (after {} records)", what, block,
                                 result.samples);
      return result;
    }
    const std::size_t body = 4 + std::size_t{count} * kRecordSize;
    uint32_t stored;
    std::memcpy(&stored, bytes.data() + pos + body, 4);
    if (stored != crc(bytes.data() + pos, body)) {
      result.error = fmt::format("{} checksum mismatch in block {} (after {} records)", what,
                                 block, result.samples);
      return result;
    }
    if (count == 0) {
      result.complete = pos + body + 4 == bytes.size();
      if (!result.complete) {
        result.error = fmt::format("{} has bytes after its end", what);
      }
      return result;
    }
    Reader r(bytes, pos + 4);
    records.clear();
    for (uint32_t i = 0; i < count; ++i) {
      Record rec{};
      if (!get_record(r, rec)) {
        result.error = fmt::format("{}: invalid record in block {}", what, block);
        return result;
      }
      records.push_back(rec);
    }
    for (const auto& rec : records) {
      store.restore(rec.target, rec.test, rec.sample);
    }
    result.samples += count;
    pos += body + 4;
    ++block;
  }
}

SnapshotLoad decode_format1(const std::string& bytes, SampleStore& store) {
  SnapshotLoad result;
  constexpr std::size_t kHeader = sizeof(kMagic1) + 4 + 8;
  Reader r(bytes, sizeof(kMagic1) + 4);
  uint64_t count = r.get<uint64_t>();
  if (count > (bytes.size() - kHeader) / kRecordSize ||
      bytes.size() != kHeader + count * kRecordSize + 4) {
    result.error = fmt::format("truncated snapshot: {} bytes for {} records", bytes.size(), count);
    return result;
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  if (stored_crc != crc(bytes.data(), bytes.size() - 4)) {
    result.error = "snapshot checksum mismatch";
    return result;
  }
  std::vector<Record> records;
  records.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    Record rec{};
    if (!get_record(r, rec)) {
      result.error = fmt::format("invalid record {}", i);
      return result;
    }
    records.push_back(rec);
  }
  for (const auto& rec : records) {
    store.restore(rec.target, rec.test, rec.sample);
  }
  result.ok = true;
  result.complete = true;
  result.samples = records.size();
  return result;
}

}  // namespace

std::string encode_snapshot(const SampleStore& store) {
  std::vector<Record> records;
  for (Target t : kTargets) {
    for (const auto& s : store.training_samples(t)) {
      records.push_back({t, false, s});
    }
    for (const auto& s : store.test_samples(t)) {
      records.push_back({t, true, s});
    }
  }
  std::string out;
  out.reserve(32 + records.size() * kRecordSize + (records.size() / kBlockRecords + 1) * 8);
  out.append(kMagic2, sizeof(kMagic2));
  put<uint32_t>(out, kFormat2);
  for (std::size_t i = 0; i < records.size(); i += kBlockRecords) {
    put_block(out, records.data() + i, std::min(kBlockRecords, records.size() - i));
  }
  put_block(out, nullptr, 0);
  return out;
}

SnapshotLoad decode_snapshot(const std::string& bytes, SampleStore& store) {
  SnapshotLoad result;
  if (bytes.size() >= sizeof(kMagic1) + 4 + 8 + 4 &&
      std::memcmp(bytes.data(), kMagic1, sizeof(kMagic1)) == 0) {
    uint32_t format;
    std::memcpy(&format, bytes.data() + sizeof(kMagic1), 4);
    if (format != 1) {
      result.error = fmt::format("unsupported snapshot format {}", format);
      return result;
    }
    return decode_format1(bytes, store);
  }
  if (bytes.size() < sizeof(kMagic2) + 4 || std::memcmp(bytes.data(), kMagic2, sizeof(kMagic2)) != 0) {
    result.error = "not a sample snapshot (bad magic or too short)";
    return result;
  }
  uint32_t format;
  std::memcpy(&format, bytes.data() + sizeof(kMagic2), 4);
  if (format != kFormat2) {
    result.error = fmt::format("unsupported snapshot format {}", format);
    return result;
  }
  return restore_blocks(bytes, sizeof(kMagic2) + 4, store, true, "snapshot");
}

std::string sample_log_header() { return std::string(kLogMagic, sizeof(kLogMagic)); }

std::string encode_log_entry(const std::vector<SampleStore::Placement>& placed) {
  std::string out;
  for (std::size_t i = 0; i < placed.size(); i += kBlockRecords) {
    std::vector<Record> records;
    for (std::size_t k = i; k < std::min(placed.size(), i + kBlockRecords); ++k) {
      records.push_back({placed[k].target, placed[k].test, placed[k].sample});
    }
    put_block(out, records.data(), records.size());
  }
  return out;
}

SnapshotLoad replay_sample_log(const std::string& bytes, SampleStore& store) {
  SnapshotLoad result;
  if (bytes.size() < sizeof(kLogMagic) || std::memcmp(bytes.data(), kLogMagic, sizeof(kLogMagic)) != 0) {
    result.error = "not a sample log (bad magic)";
    return result;
  }
  return restore_blocks(bytes, sizeof(kLogMagic), store, false, "sample log");
}

SampleLog::SampleLog(std::string path) : path_(std::move(path)) {
  util::ensure_parent_dir(path_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw std::runtime_error(fmt::format("cannot open sample log {}: {}", path_, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && st.st_size == 0) {
    append(sample_log_header());
  }
}

SampleLog::~SampleLog() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

void SampleLog::append(const std::string& entry) {
  std::size_t done = 0;
  while (done < entry.size()) {
    const ssize_t n = ::write(fd_, entry.data() + done, entry.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw std::runtime_error(fmt::format("sample log write failed: {}", std::strerror(errno)));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fdatasync(fd_) != 0) {
    throw std::runtime_error(fmt::format("sample log fdatasync failed: {}", std::strerror(errno)));
  }
}

void SampleLog::reset() {
  // A fresh file renamed over the old one (write_file_atomic): a crash leaves either the old
  // log (replayed on top of the new snapshot: duplicates at worst, never a loss) or the new one.
  util::write_file_atomic(path_, sample_log_header());
  ::close(fd_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) {
    throw std::runtime_error(fmt::format("cannot reopen sample log {}: {}", path_, std::strerror(errno)));
  }
}

}  // namespace llmd::trainer
