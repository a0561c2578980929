#include "data/md5.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"

namespace packrat::data {

Md5::Md5() { md5_init(&ctx_); }

void Md5::update(const void* data, size_t bytes) { md5_update(&ctx_, bytes, static_cast<const uint8_t*>(data)); }

std::array<uint8_t, 16> Md5::digest() {
  std::array<uint8_t, 16> out{};
  md5_digest(&ctx_, out.size(), out.data());
  return out;
}

std::string Md5::hex_digest() {
  std::string s;
  for (uint8_t b : digest()) s += fmt::format("{:02x}", b);
  return s;
}

std::string md5_hex(std::string_view data) {
  Md5 m;
  m.update(data);
  return m.hex_digest();
}

std::string md5_file(const std::filesystem::path& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) fail("md5: cannot open {}: {}", path.string(), std::strerror(errno));
  Md5 m;
  std::vector<uint8_t> buf(1 << 16);
  size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) m.update(buf.data(), got);
  if (std::ferror(f.get())) fail("md5: error reading {}: {}", path.string(), std::strerror(errno));
  return m.hex_digest();
}

}  // namespace packrat::data
