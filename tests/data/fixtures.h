#pragma once
// Helpers for the data tests: temporary folders and tiny files in the real dataset formats.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "tests/support/errors.h"

namespace packrat::data::testing {

namespace fs = std::filesystem;

// A fresh folder under the temp dir, removed with everything in it at the end of the test.
using packrat::testing::message_of;  // the message of the packrat::Error fn throws

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "packrat-data-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& s) const { return path_ / s; }

 private:
  fs::path path_;
};

inline void write_bytes(const fs::path& p, const std::vector<uint8_t>& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

inline void write_text(const fs::path& p, const std::string& s) { write_bytes(p, std::vector<uint8_t>(s.begin(), s.end())); }

inline std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void write_gz(const fs::path& p, const std::vector<uint8_t>& bytes) {
  fs::create_directories(p.parent_path());
  gzFile gz = gzopen(p.c_str(), "wb");
  if (!gz) throw std::runtime_error("cannot write " + p.string());
  if (!bytes.empty()) gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(gz);
}

// The pixel value the fixtures give byte k of image `record` (k in (C, H, W) order).
inline uint8_t fixture_pixel(int64_t record, int64_t k) { return static_cast<uint8_t>((record * 37 + k * 11 + (k >> 8)) & 0xff); }

// CIFAR records: `label_bytes` label bytes (from `labels`, record-major) then 3072 pixels.
inline std::vector<uint8_t> cifar_records(const std::vector<std::vector<uint8_t>>& labels, int64_t first_record = 0) {
  std::vector<uint8_t> out;
  for (size_t r = 0; r < labels.size(); ++r) {
    out.insert(out.end(), labels[r].begin(), labels[r].end());
    for (int64_t k = 0; k < 3072; ++k) out.push_back(fixture_pixel(first_record + static_cast<int64_t>(r), k));
  }
  return out;
}

// An IDX file: magic 00 00 08 <rank>, big-endian dims, then the data.
inline std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(d >> s));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// A ustar archive of the given entries (a name ending in '/' is a folder), with end blocks.
struct TarInput {
  std::string name;
  std::string data;
  char type = 0;  // 0: file ('0') or folder ('5') from the name; else this type flag
};

inline void tar_header(std::vector<uint8_t>& out, const std::string& name, size_t size, char type) {
  char h[512] = {};
  std::string n = name, prefix;
  if (n.size() > 100) {  // split at a '/' into prefix (155) and name (100)
    const size_t cut = n.rfind('/', 155);
    prefix = n.substr(0, cut);
    n = n.substr(cut + 1);
  }
  std::memcpy(h, n.data(), n.size());
  std::snprintf(h + 100, 8, "%07o", type == '5' ? 0755 : 0644);
  std::snprintf(h + 108, 8, "%07o", 1000);
  std::snprintf(h + 116, 8, "%07o", 1000);
  std::snprintf(h + 124, 12, "%011lo", static_cast<unsigned long>(size));
  std::snprintf(h + 136, 12, "%011lo", 1700000000ul);
  h[156] = type;
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  std::memcpy(h + 345, prefix.data(), prefix.size());
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h + 148, 8, "%06o", sum);
  h[155] = ' ';
  out.insert(out.end(), h, h + 512);
}

inline std::vector<uint8_t> tar_bytes(const std::vector<TarInput>& entries) {
  std::vector<uint8_t> out;
  for (const TarInput& e : entries) {
    const bool dir = !e.name.empty() && e.name.back() == '/';
    const char type = e.type ? e.type : (dir ? '5' : '0');
    tar_header(out, e.name, e.data.size(), type);
    out.insert(out.end(), e.data.begin(), e.data.end());
    out.resize((out.size() + 511) / 512 * 512, 0);
  }
  out.resize(out.size() + 1024, 0);
  return out;
}

inline std::string file_url(const fs::path& p) { return "file://" + fs::absolute(p).string(); }

}  // namespace packrat::data::testing
