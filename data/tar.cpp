#include "data/tar.h"

#include <archive.h>
#include <archive_entry.h>

#include <memory>
#include <string_view>

#include "core/error.h"

namespace packrat::data {
namespace fs = std::filesystem;

namespace {

using ArchivePtr = std::unique_ptr<archive, int (*)(archive*)>;

std::string error_of(archive* a) {
  const char* s = archive_error_string(a);
  return s ? s : "unknown error";
}

bool says_truncated(std::string_view msg) {
  return msg.find("runcated") != std::string_view::npos || msg.find("remature end") != std::string_view::npos;
}

// The member's path relative to the destination; refuses absolute paths and "..".
fs::path safe_relative(const std::string& name, const std::string& a) {
  const fs::path p(name);
  if (name.empty()) fail("tar: {} holds a member with an empty path; refusing to unpack it", a);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory())
    fail("tar: {} holds an absolute path '{}'; refusing to unpack it", a, name);
  for (const auto& part : p)
    if (part == "..") fail("tar: {} holds a path '{}' that climbs out with '..'; refusing to unpack it", a, name);
  return p.lexically_normal();
}

}  // namespace

std::vector<TarEntry> extract_tar_gz(const fs::path& archive_path, const fs::path& dest) {
  const std::string a = archive_path.string();
  ArchivePtr in(archive_read_new(), archive_read_free);
  if (!in) fail("tar: cannot unpack {}: out of memory", a);
  archive_read_support_filter_gzip(in.get());  // and uncompressed tar: the "none" filter is always on
  archive_read_support_format_tar(in.get());   // ustar, GNU tar, pax
  if (archive_read_open_filename(in.get(), a.c_str(), 1 << 17) != ARCHIVE_OK) {
    // Opening reads the first header to recognise the format.
    const std::string msg = error_of(in.get());
    std::error_code ec;
    if (!fs::is_regular_file(archive_path, ec)) fail("tar: cannot open {}: {}", a, msg);
    if (says_truncated(msg)) fail("tar: {} is truncated: {}", a, msg);
    fail("tar: {} is corrupt: the header at byte 0 is not a tar header ({})", a, msg);
  }

  fs::create_directories(dest);
  // Members are written under dest's real path: no symbolic link on the way to dest trips the
  // symlink check, and the path libarchive sees has no "..".
  const fs::path base = fs::canonical(dest);
  ArchivePtr out(archive_write_disk_new(), archive_write_free);
  if (!out) fail("tar: cannot unpack {}: out of memory", a);
  // Secure extraction: refuse ".." and writing through symbolic links. Absolute member paths are
  // refused above (ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS cannot be set: the paths given to
  // libarchive are dest's absolute path joined with the member's).
  archive_write_disk_set_options(out.get(), ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS);

  std::vector<TarEntry> entries;
  std::string last = "(none)";
  for (;;) {
    archive_entry* e = nullptr;
    const int r = archive_read_next_header(in.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN || r == ARCHIVE_RETRY) {
      const std::string msg = error_of(in.get());
      const int64_t at = archive_read_header_position(in.get());
      if (says_truncated(msg)) fail("tar: {} is truncated: it ends in the header at byte {}, after member '{}' ({})", a, at, last, msg);
      fail("tar: {} is corrupt: the header at byte {} is unreadable ({})", a, at, msg);
    }
    const char* raw_name = archive_entry_pathname(e);
    const std::string name = raw_name ? raw_name : "";
    const mode_t type = archive_entry_filetype(e);
    const bool dir = type == AE_IFDIR;
    // Hard links come as regular files with a link target: skipped, like symbolic links and devices.
    if ((type != AE_IFREG && !dir) || archive_entry_hardlink(e) != nullptr) {
      archive_read_data_skip(in.get());
      continue;
    }
    const fs::path rel = safe_relative(name, a);
    const int64_t size = dir ? 0 : archive_entry_size(e);
    archive_entry_set_pathname(e, (base / rel).c_str());
    archive_entry_set_perm(e, dir ? 0755 : 0644);
    if (archive_write_header(out.get(), e) < ARCHIVE_WARN)
      fail("tar: cannot unpack member '{}' of {} into {}: {}", name, a, base.string(), error_of(out.get()));
    int64_t written = 0;
    for (;;) {
      const void* buf = nullptr;
      size_t n = 0;
      la_int64_t offset = 0;
      const int rd = archive_read_data_block(in.get(), &buf, &n, &offset);
      if (rd == ARCHIVE_EOF) break;
      if (rd < ARCHIVE_WARN) {
        const std::string msg = error_of(in.get());
        if (says_truncated(msg))
          fail("tar: {} is truncated: entry '{}' should have {} bytes, the archive ends after {} ({})", a, name, size,
               written, msg);
        fail("tar: {} is corrupt inside member '{}': {}", a, name, msg);
      }
      if (archive_write_data_block(out.get(), buf, n, offset) < ARCHIVE_WARN)
        fail("tar: cannot write member '{}' of {} to {}: {}", name, a, (base / rel).string(), error_of(out.get()));
      written = offset + static_cast<int64_t>(n);
    }
    if (archive_write_finish_entry(out.get()) < ARCHIVE_WARN)
      fail("tar: cannot write member '{}' of {} to {}: {}", name, a, (base / rel).string(), error_of(out.get()));
    entries.push_back({rel.generic_string(), size, dir});
    last = name;
  }
  if (archive_write_close(out.get()) < ARCHIVE_WARN)
    fail("tar: cannot finish unpacking {}: {}", a, error_of(out.get()));
  return entries;
}

}  // namespace packrat::data
