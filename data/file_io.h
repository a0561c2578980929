#pragma once
// Whole-file reads with errors that name the file: plain files and gzip streams (zlib).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace packrat::data {

// `who` prefixes error messages ("cifar10: cannot open /data/x.bin: No such file or directory").
std::vector<uint8_t> read_file(const std::filesystem::path& path, std::string_view who);
// Decompresses a .gz file (a plain file is read as is, as zlib's gzread does).
std::vector<uint8_t> read_gz_file(const std::filesystem::path& path, std::string_view who);
// Text lines of a small file, trailing '\r' and empty lines dropped.
std::vector<std::string> read_lines(const std::filesystem::path& path, std::string_view who);

}  // namespace packrat::data
