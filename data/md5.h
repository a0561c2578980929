#pragma once
// MD5 (RFC 1321), to check downloaded archives against their published digests.
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
  void block(const uint8_t* p);
  uint32_t state_[4];
  uint64_t length_ = 0;  // bytes so far
  uint8_t buffer_[64];
  size_t buffered_ = 0;
};

std::string md5_hex(std::string_view data);
// Throws naming the file when it cannot be read.
std::string md5_file(const std::filesystem::path& path);

}  // namespace packrat::data
