#include "trainer/persistence_legacy.h"

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "trainer/record_codec.h"

namespace llmd::trainer::legacy {
namespace {

using codec::kRecordSize;
using codec::Reader;
using codec::Record;

constexpr char kMagic1[8] = {'L', 'L', 'M', 'D', 'S', 'N', 'P', '1'};
constexpr char kMagic2[8] = {'L', 'L', 'M', 'D', 'S', 'N', 'P', '2'};
constexpr char kLogMagic1[8] = {'L', 'L', 'M', 'D', 'L', 'O', 'G', '1'};
constexpr uint32_t kMaxBlockRecords = 4096;

bool starts_with(const std::string& bytes, const char (&magic)[8]) {
  return bytes.size() >= 8 && std::memcmp(bytes.data(), magic, 8) == 0;
}

// Blocks u32 count | records | u32 crc32(count + records) from `pos` on, until the end block
// (count 0) or the first torn or damaged block.
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
      result.error =
          fmt::format("{} cut after {} blocks ({} records)", what, block, result.samples);
      return result;
    }
    uint32_t count;
    std::memcpy(&count, bytes.data() + pos, 4);
    if (count > kMaxBlockRecords || bytes.size() - pos < 8 + std::size_t{count} * kRecordSize) {
      result.error = fmt::format("{} cut or damaged in block {} (after {} records)", what, block,
                                 result.samples);
      return result;
    }
    const std::size_t body = 4 + std::size_t{count} * kRecordSize;
    uint32_t stored;
    std::memcpy(&stored, bytes.data() + pos + body, 4);
    if (stored != codec::crc(bytes.data() + pos, body)) {
      result.error = fmt::format("{} checksum mismatch in block {} (after {} records)", what, block,
                                 result.samples);
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
      if (!codec::get_record(r, rec)) {
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
  if (bytes.size() < kHeader + 4) {
    result.error = "truncated snapshot";
    return result;
  }
  Reader r(bytes, sizeof(kMagic1) + 4);
  uint64_t count = r.get<uint64_t>();
  if (count > (bytes.size() - kHeader) / kRecordSize ||
      bytes.size() != kHeader + count * kRecordSize + 4) {
    result.error = fmt::format("truncated snapshot: {} bytes for {} records", bytes.size(), count);
    return result;
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  if (stored_crc != codec::crc(bytes.data(), bytes.size() - 4)) {
    result.error = "snapshot checksum mismatch";
    return result;
  }
  std::vector<Record> records;
  records.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    Record rec{};
    if (!codec::get_record(r, rec)) {
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

bool is_snapshot(const std::string& bytes) {
  return starts_with(bytes, kMagic1) || starts_with(bytes, kMagic2);
}

bool is_log(const std::string& bytes) {
  return starts_with(bytes, kLogMagic1);
}

SnapshotLoad decode_snapshot(const std::string& bytes, SampleStore& store) {
  SnapshotLoad result;
  if (bytes.size() < 12) {
    result.error = "truncated snapshot";
    return result;
  }
  uint32_t format;
  std::memcpy(&format, bytes.data() + 8, 4);
  if (starts_with(bytes, kMagic1) && format == 1) {
    return decode_format1(bytes, store);
  }
  if (starts_with(bytes, kMagic2) && format == 2) {
    return restore_blocks(bytes, 12, store, true, "snapshot");
  }
  result.error = fmt::format("unsupported snapshot format {}", format);
  return result;
}

SnapshotLoad replay_log(const std::string& bytes, SampleStore& store) {
  return restore_blocks(bytes, sizeof(kLogMagic1), store, false, "sample log");
}

}  // namespace llmd::trainer::legacy
