#pragma once
// The fixed-size binary sample record shared by the snapshot and the sample log (internal to
// persistence*.cc), and the helpers both formats read and write it with.
//
// record: u8 target | u8 test | f32 actual_ms | f64 kv | i64 input | i64 waiting | i64 running
//         | i64 generated | f64 prefix | i8 pod_type | i64 prefill_inflight | i64 decode_inflight
//         | i64 encoder_matched | i64 encoder_input          (little-endian, 87 bytes)
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "trainer/sample_store.h"

namespace llmd::trainer::codec {

inline constexpr std::size_t kRecordSize = 1 + 1 + 4 + 8 + 8 * 4 + 8 + 1 + 8 * 4;

struct Record {
  Target target;
  bool test;
  Sample sample;
};

template <typename T>
void put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

// Sequential reads from a buffer the caller has bounds-checked.
class Reader {
 public:
  Reader(std::string_view s, std::size_t pos) : s_(s), pos_(pos) {}
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  void skip(std::size_t n) { pos_ += n; }
  std::size_t pos() const { return pos_; }

 private:
  std::string_view s_;
  std::size_t pos_ = 0;
};

void put_record(std::string& out, Target t, bool test, const Sample& s);
// Reads one record at `r`; false when its values cannot be a sample.
bool get_record(Reader& r, Record& rec);
uint32_t crc(const char* data, std::size_t n);

}  // namespace llmd::trainer::codec
