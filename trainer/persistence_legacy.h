#pragma once
// Readers for the files earlier trainers wrote (internal to persistence.cc), so an upgrade keeps
// its samples: snapshot format 1 (one CRC over the file, all or nothing), snapshot format 2 and
// sample log LLMDLOG1 (u32 count | records | u32 crc blocks, no sync marker: they stop at the
// first damaged block). New files are written in the framed formats of persistence.h.
#include <string>

#include "trainer/persistence.h"

namespace llmd::trainer::legacy {

bool is_snapshot(const std::string& bytes);  // "LLMDSNP1" or "LLMDSNP2"
bool is_log(const std::string& bytes);       // "LLMDLOG1"
SnapshotLoad decode_snapshot(const std::string& bytes, SampleStore& store);
SnapshotLoad replay_log(const std::string& bytes, SampleStore& store);

}  // namespace llmd::trainer::legacy
