#pragma once
// A small reader for (gzipped) tar archives: ustar and GNU tar, with GNU long names ('L') and
// pax 'path' records. Enough to unpack the CIFAR archives without libarchive.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace packrat::data {

struct TarEntry {
  std::string path;  // relative, '/'-separated
  int64_t size = 0;
  bool directory = false;
};

// Unpacks `archive` (.tar.gz, or a plain .tar: zlib reads it as is) under `dest`, creating
// folders as needed, and returns the entries written. Throws naming the archive when it is
// truncated, a header checksum is wrong, the gzip data is corrupt, or an entry's path is absolute
// or climbs out with "..". Symbolic links and devices are skipped.
std::vector<TarEntry> extract_tar_gz(const std::filesystem::path& archive, const std::filesystem::path& dest);

}  // namespace packrat::data
