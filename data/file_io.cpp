#include "data/file_io.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "core/error.h"

namespace packrat::data {

std::vector<uint8_t> read_file(const std::filesystem::path& path, std::string_view who) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) fail("{}: cannot open {}: {}", who, path.string(), std::strerror(errno));
  std::error_code ec;
  const auto expected = std::filesystem::file_size(path, ec);
  std::vector<uint8_t> bytes(ec ? 0 : static_cast<size_t>(expected));
  size_t got = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), f.get());
  bytes.resize(got);
  uint8_t buf[1 << 16];  // the rest, when the size was unknown or the file grew
  while ((got = std::fread(buf, 1, sizeof buf, f.get())) > 0) bytes.insert(bytes.end(), buf, buf + got);
  if (std::ferror(f.get())) fail("{}: error reading {}: {}", who, path.string(), std::strerror(errno));
  return bytes;
}

std::vector<uint8_t> read_gz_file(const std::filesystem::path& path, std::string_view who) {
  gzFile gz = gzopen(path.c_str(), "rb");
  if (!gz) fail("{}: cannot open {}: {}", who, path.string(), errno ? std::strerror(errno) : "out of memory");
  std::unique_ptr<gzFile_s, int (*)(gzFile)> guard(gz, &gzclose);
  gzbuffer(gz, 1 << 17);
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> buf(1 << 17);
  for (;;) {
    const int got = gzread(gz, buf.data(), static_cast<unsigned>(buf.size()));
    if (got > 0) bytes.insert(bytes.end(), buf.data(), buf.data() + got);
    // gzread stops quietly at a truncated stream (Z_BUF_ERROR); gzerror tells.
    int code = 0;
    const char* msg = gzerror(gz, &code);
    if (code == Z_BUF_ERROR)
      fail("{}: {} is truncated: the gzip stream ends after {} bytes of data", who, path.string(), bytes.size());
    if (got < 0 || (code != Z_OK && code != Z_STREAM_END))
      fail("{}: {} is corrupt: zlib says '{}'", who, path.string(), msg ? msg : "error");
    if (got == 0) break;
  }
  return bytes;
}

std::vector<std::string> read_lines(const std::filesystem::path& path, std::string_view who) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open {}: {}", who, path.string(), std::strerror(errno));
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

}  // namespace packrat::data
