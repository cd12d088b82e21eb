#pragma once
// Minimal tar.gz writer (POSIX ustar + gzip via zlib) for the trainer's /model/export bundle.
#include <cstdint>
#include <string>
#include <vector>

namespace llmd::util {

struct TarMember {
  std::string name;  // < 100 bytes, no directories needed
  std::string data;
  int64_t mtime = 0;  // seconds since epoch; must be non-zero for the export contract
};

std::string make_tar_gz(const std::vector<TarMember>& members);

}  // namespace llmd::util
