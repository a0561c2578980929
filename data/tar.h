#pragma once
// Unpacking (gzipped) tar archives through libarchive (Debian libarchive-dev): ustar, GNU tar and
// pax, with long names.
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

// Unpacks `archive` (.tar.gz, or a plain .tar) under `dest`, creating folders as needed, and
// returns the entries written. Throws packrat::Error naming the archive (and the member, where
// there is one) when it is truncated or corrupt, or a member's path is absolute or climbs out with
// "..". Nothing is written through a symbolic link already under `dest` (libarchive's secure
// extraction). Symbolic links, hard links and devices in the archive are skipped; files get mode
// 0644 and folders 0755 (less the umask), whatever the archive says.
std::vector<TarEntry> extract_tar_gz(const std::filesystem::path& archive, const std::filesystem::path& dest);

}  // namespace packrat::data
