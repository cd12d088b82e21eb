#include "common/util/targz.h"

#include <zlib.h>

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace llmd::util {
namespace {

void put_octal(char* field, std::size_t width, uint64_t value) {
  // width includes the terminating NUL.
  std::string s = fmt::format("{:0{}o}", value, width - 1);
  std::memcpy(field, s.data(), width - 1);
  field[width - 1] = '\0';
}

std::string tar_header(const TarMember& m) {
  std::string h(512, '\0');
  if (m.name.size() >= 100) {
    throw std::runtime_error("tar member name too long: " + m.name);
  }
  std::memcpy(&h[0], m.name.data(), m.name.size());
  put_octal(&h[100], 8, 0644);
  put_octal(&h[108], 8, 0);
  put_octal(&h[116], 8, 0);
  put_octal(&h[124], 12, m.data.size());
  put_octal(&h[136], 12, static_cast<uint64_t>(m.mtime));
  std::memset(&h[148], ' ', 8);  // checksum is computed with spaces here
  h[156] = '0';
  std::memcpy(&h[257], "ustar", 6);
  std::memcpy(&h[263], "00", 2);
  unsigned sum = 0;
  for (unsigned char c : h) {
    sum += c;
  }
  put_octal(&h[148], 7, sum);
  h[155] = ' ';
  return h;
}

std::string gzip(const std::string& raw) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    throw std::runtime_error("deflateInit2 failed");
  }
  std::string out;
  out.resize(deflateBound(&zs, raw.size()) + 64);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    throw std::runtime_error("deflate failed");
  }
  out.resize(zs.total_out);
  return out;
}

}  // namespace

std::string make_tar_gz(const std::vector<TarMember>& members) {
  std::string tar;
  for (const auto& m : members) {
    tar += tar_header(m);
    tar += m.data;
    tar.append((512 - m.data.size() % 512) % 512, '\0');
  }
  tar.append(1024, '\0');
  return gzip(tar);
}

}  // namespace llmd::util
