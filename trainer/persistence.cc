#include "trainer/persistence.h"

#include <zlib.h>

#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace llmd::trainer {
namespace {

constexpr char kMagic[8] = {'L', 'L', 'M', 'D', 'S', 'N', 'P', '1'};
constexpr uint32_t kFormat = 1;
constexpr std::size_t kRecordSize = 1 + 1 + 4 + 8 + 8 * 4 + 8 + 1 + 8 * 4;

template <typename T>
void put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
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
  out.reserve(24 + records.size() * kRecordSize);
  out.append(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kFormat);
  put<uint64_t>(out, records.size());
  for (const auto& r : records) {
    put_record(out, r.target, r.test, r.sample);
  }
  put<uint32_t>(out, crc(out.data(), out.size()));
  return out;
}

SnapshotLoad decode_snapshot(const std::string& bytes, SampleStore& store) {
  SnapshotLoad result;
  constexpr std::size_t kHeader = sizeof(kMagic) + 4 + 8;
  if (bytes.size() < kHeader + 4 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    result.error = "not a sample snapshot (bad magic or too short)";
    return result;
  }
  Reader r(bytes);
  r.get<std::array<char, 8>>();
  uint32_t format = r.get<uint32_t>();
  uint64_t count = r.get<uint64_t>();
  if (format != kFormat) {
    result.error = fmt::format("unsupported snapshot format {}", format);
    return result;
  }
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
      result.error = fmt::format("invalid record {}", i);
      return result;
    }
    rec.target = static_cast<Target>(t);
    rec.test = test == 1;
    f.pod_type = static_cast<features::PodType>(pod);
    records.push_back(rec);
  }
  for (const auto& rec : records) {
    store.restore(rec.target, rec.test, rec.sample);
  }
  result.ok = true;
  result.samples = records.size();
  return result;
}

}  // namespace llmd::trainer
