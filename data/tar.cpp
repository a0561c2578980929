#include "data/tar.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace packrat::data {
namespace fs = std::filesystem;

namespace {

class GzReader {
 public:
  explicit GzReader(const fs::path& path) : path_(path.string()), gz_(gzopen(path.c_str(), "rb")) {
    if (!gz_) fail("tar: cannot open {}: {}", path_, errno ? std::strerror(errno) : "out of memory");
    gzbuffer(gz_, 1 << 17);
  }
  ~GzReader() { gzclose(gz_); }
  // Reads exactly n bytes; returns the count read (less only at the end of the data).
  size_t read(void* dst, size_t n) {
    size_t total = 0;
    while (total < n) {
      const int got = gzread(gz_, static_cast<char*>(dst) + total, static_cast<unsigned>(std::min<size_t>(n - total, 1u << 30)));
      if (got > 0) total += static_cast<size_t>(got);
      int code = 0;
      const char* msg = gzerror(gz_, &code);
      if (code == Z_BUF_ERROR) fail("tar: {} is truncated: the gzip stream ends early", path_);
      if (got < 0 || (code != Z_OK && code != Z_STREAM_END))
        fail("tar: {} is corrupt: zlib says '{}'", path_, msg ? msg : "error");
      if (got == 0) break;
    }
    return total;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  gzFile gz_;
};

int64_t octal(const char* p, size_t n, const std::string& archive, const char* field) {
  // GNU base-256 for large values: the first byte has its top bit set.
  if (static_cast<unsigned char>(p[0]) & 0x80) {
    int64_t v = static_cast<unsigned char>(p[0]) & 0x7f;
    for (size_t i = 1; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
  }
  int64_t v = 0;
  size_t i = 0;
  while (i < n && (p[i] == ' ' || p[i] == '\0')) ++i;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) v = v * 8 + (p[i] - '0');
  for (; i < n; ++i)
    if (p[i] != ' ' && p[i] != '\0') fail("tar: {} is corrupt: a header's {} field is not an octal number", archive, field);
  return v;
}

std::string field(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

// A relative path that stays inside the destination.
fs::path safe_relative(const std::string& name, const std::string& archive) {
  const fs::path p(name);
  if (p.is_absolute()) fail("tar: {} holds an absolute path '{}'; refusing to unpack it", archive, name);
  for (const auto& part : p)
    if (part == "..") fail("tar: {} holds a path '{}' that climbs out with '..'; refusing to unpack it", archive, name);
  return p.lexically_normal();
}

}  // namespace

std::vector<TarEntry> extract_tar_gz(const fs::path& archive, const fs::path& dest) {
  GzReader in(archive);
  const std::string& a = in.path();
  std::vector<TarEntry> entries;
  std::string long_name;  // from a GNU 'L' or pax 'x' record, for the next entry
  std::vector<char> data;
  fs::create_directories(dest);
  for (int64_t offset = 0;; offset += 512) {
    char h[512];
    const size_t got = in.read(h, 512);
    if (got == 0) fail("tar: {} is truncated: it ends at byte {} without the end-of-archive blocks", a, offset);
    if (got < 512) fail("tar: {} is truncated: the header at byte {} has {} of 512 bytes", a, offset, got);
    if (std::all_of(h, h + 512, [](char c) { return c == 0; })) break;  // end of archive
    // Checksum: the sum of the header bytes with the checksum field read as spaces.
    int64_t sum = 0;
    for (int i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    const int64_t stored = octal(h + 148, 8, a, "checksum");
    if (stored != sum)
      fail("tar: {} is corrupt: the header at byte {} has checksum {} but its bytes sum to {}", a, offset, stored, sum);
    const char type = h[156];
    const int64_t size = octal(h + 124, 12, a, "size");
    std::string name = field(h, 100);
    if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345] != 0) name = field(h + 345, 155) + "/" + name;
    if (!long_name.empty()) name = std::move(long_name), long_name.clear();

    const int64_t padded = (size + 511) / 512 * 512;
    const bool regular = type == '0' || type == '\0' || type == '7';
    const bool keep = regular || type == 'L' || type == 'x';
    data.resize(keep ? static_cast<size_t>(padded) : 0);
    if (keep) {
      const size_t body = in.read(data.data(), static_cast<size_t>(padded));
      if (static_cast<int64_t>(body) < padded)
        fail("tar: {} is truncated: entry '{}' should have {} bytes, the archive ends after {}", a, name, size,
             std::min<int64_t>(static_cast<int64_t>(body), size));
    } else {
      std::vector<char> skip(static_cast<size_t>(std::min<int64_t>(padded, 1 << 20)));
      for (int64_t left = padded; left > 0;) {
        const size_t want = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(skip.size())));
        if (in.read(skip.data(), want) < want) fail("tar: {} is truncated inside entry '{}'", a, name);
        left -= static_cast<int64_t>(want);
      }
    }
    offset += padded;

    if (type == 'L') {  // GNU long name: the data is the next entry's name
      long_name = std::string(data.data(), strnlen(data.data(), static_cast<size_t>(size)));
      continue;
    }
    if (type == 'x') {  // pax extended header: "<len> key=value\n" records; only path matters
      const std::string recs(data.data(), static_cast<size_t>(size));
      for (size_t pos = 0; pos < recs.size();) {
        const size_t space = recs.find(' ', pos);
        if (space == std::string::npos) break;
        const int64_t len = std::atoll(recs.c_str() + pos);
        if (len <= 0 || pos + static_cast<size_t>(len) > recs.size()) fail("tar: {} is corrupt: a bad pax record", a);
        const std::string kv = recs.substr(space + 1, pos + static_cast<size_t>(len) - space - 2);
        if (kv.starts_with("path=")) long_name = kv.substr(5);
        pos += static_cast<size_t>(len);
      }
      continue;
    }
    if (type == 'g') continue;  // pax global header
    if (type == '5') {
      const fs::path rel = safe_relative(name, a);
      fs::create_directories(dest / rel);
      entries.push_back({rel.generic_string(), 0, true});
      continue;
    }
    if (!regular) continue;  // links, devices, FIFOs: not needed for datasets
    const fs::path rel = safe_relative(name, a);
    const fs::path out = dest / rel;
    fs::create_directories(out.parent_path());
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(out.c_str(), "wb"), &std::fclose);
    if (!f) fail("tar: cannot create {} while unpacking {}: {}", out.string(), a, std::strerror(errno));
    if (size > 0 && std::fwrite(data.data(), 1, static_cast<size_t>(size), f.get()) != static_cast<size_t>(size))
      fail("tar: cannot write {} while unpacking {}: {}", out.string(), a, std::strerror(errno));
    if (std::fclose(f.release()) != 0) fail("tar: cannot write {} while unpacking {}: {}", out.string(), a, std::strerror(errno));
    entries.push_back({rel.generic_string(), size, false});
  }
  return entries;
}

}  // namespace packrat::data
