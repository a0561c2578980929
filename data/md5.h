#pragma once
// MD5 (RFC 1321), to check downloaded archives against their published digests: Nettle's
// (nettle-dev), streamed.
#include <nettle/md5.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace packrat::data {

class Md5 {
 public:
  Md5();
  void update(const void* data, size_t bytes);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::array<uint8_t, 16> digest();  // finishes; the object must not be updated afterwards
  std::string hex_digest();          // 32 lowercase hex digits

 private:
  md5_ctx ctx_;
};

std::string md5_hex(std::string_view data);
// Throws naming the file when it cannot be read.
std::string md5_file(const std::filesystem::path& path);

}  // namespace packrat::data
