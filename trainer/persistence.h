#pragma once
// Sample snapshot: a binary file written atomically (temp + rename) holding every training and
// hold-out sample in FIFO order, closed by a CRC-32. A truncated or corrupt file is reported
// and skipped (the caller logs it and starts empty); loading never crashes.
//
// Layout (little-endian): "LLMDSNP1" | u32 format=1 | u64 count | count x record | u32 crc32
// record: u8 target | u8 test | f32 actual_ms | f64 kv | i64 input | i64 waiting | i64 running
//         | i64 generated | f64 prefix | i8 pod_type | i64 prefill_inflight | i64 decode_inflight
//         | i64 encoder_matched | i64 encoder_input
#include <cstddef>
#include <string>

#include "trainer/sample_store.h"

namespace llmd::trainer {

std::string encode_snapshot(const SampleStore& store);

struct SnapshotLoad {
  bool ok = false;
  std::size_t samples = 0;
  std::string error;  // why the snapshot was skipped
};
// Decodes into `store` only when the whole file is valid (all or nothing).
SnapshotLoad decode_snapshot(const std::string& bytes, SampleStore& store);

}  // namespace llmd::trainer
