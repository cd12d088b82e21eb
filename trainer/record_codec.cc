#include "trainer/record_codec.h"

#include <zlib.h>

namespace llmd::trainer::codec {

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

uint32_t crc(const char* data, std::size_t n) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(n)));
}

}  // namespace llmd::trainer::codec
