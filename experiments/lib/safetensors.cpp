#include "experiments/lib/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "experiments/lib/json.h"

namespace packrat {

namespace {

const char* st_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::f32;
  else if (s == "F64") out = DType::f64;
  else if (s == "I64") out = DType::i64;
  else if (s == "I32") out = DType::i32;
  else if (s == "U8") out = DType::u8;
  else if (s == "BF16") out = DType::bf16;
  else if (s == "F16") out = DType::f16;
  else return false;
  return true;
}

void write_all(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("{}: write failed: {}", path, std::strerror(errno));
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string tmp = (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create {}: {}", path, tmp, std::strerror(errno));
  try {
    write_all(fd, bytes.data(), bytes.size(), tmp);
    if (::fsync(fd) != 0) fail("{}: fsync failed: {}", tmp, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot rename {} over it: {}", path, tmp, std::strerror(err));
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // make the rename itself durable
    ::close(dfd);
  }
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json& m = header["__metadata__"];
    m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = Json(v);
  }
  std::vector<Tensor> plain;
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    PACKRAT_CHECK(t.defined(), "{}: tensor '{}' is undefined", path, name);
    PACKRAT_CHECK(name != "__metadata__" && !header.contains(name), "{}: tensor name '{}' is used twice", path, name);
    Tensor p = t.to_plain().to(Device::cpu());  // a GPU tensor's bytes are copied to the host
    Json e = Json::object();
    e["dtype"] = Json(st_dtype(p.dtype()));
    Json shape = Json::array();
    for (int64_t d : p.shape().dims()) shape.push_back(Json(d));
    e["shape"] = shape;
    Json offs = Json::array();
    offs.push_back(Json(offset));
    offs.push_back(Json(offset + static_cast<int64_t>(p.nbytes())));
    e["data_offsets"] = offs;
    header[name] = e;
    offset += static_cast<int64_t>(p.nbytes());
    plain.push_back(p);
  }
  // Metadata strings may come from users: bytes that are not UTF-8 are replaced, not thrown on.
  std::string h = header.dump(-1, ' ', false, Json::error_handler_t::replace);
  h.append((8 - h.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string bytes;
  bytes.reserve(8 + h.size() + static_cast<size_t>(offset));
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((n >> (8 * i)) & 0xFF);
  bytes += h;
  for (const Tensor& p : plain) bytes.append(static_cast<const char*>(p.raw()), p.nbytes());
  write_file_atomic(path, bytes);
}

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

namespace {

// Reads exactly n bytes at `offset`; throws naming the file on an error or a short file.
void read_at(int fd, char* data, size_t n, int64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, data, n, offset);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("{}: read failed: {}", path, std::strerror(errno));
    if (r == 0) fail("{}: the file ended at byte {} while being read (was it truncated meanwhile?)", path, offset);
    data += r;
    n -= static_cast<size_t>(r);
    offset += r;
  }
}

// The format's own cap on the JSON header (huggingface/safetensors: 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

}  // namespace

// The header is read and checked against the file's size first; only then is each tensor
// allocated and read into, so a huge or corrupt file is refused without reading it whole.
SafetensorsFile read_safetensors(const std::string& path, MemTag tag) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  PACKRAT_CHECK(S_ISREG(st.st_mode), "{}: not a regular file", path);
  const auto file_size = static_cast<uint64_t>(st.st_size);
  PACKRAT_CHECK(file_size >= 8, "{}: not a safetensors file: {} bytes, shorter than the 8-byte header length",
                path, file_size);
  unsigned char len[8];
  read_at(fd, reinterpret_cast<char*>(len), 8, 0, path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  PACKRAT_CHECK(n >= 2 && n <= file_size - 8, "{}: corrupt safetensors file: header length {} does not fit in {} bytes",
                path, n, file_size);
  PACKRAT_CHECK(n <= kMaxHeaderBytes, "{}: corrupt safetensors file: header length {} is more than the format's "
                "limit of {} bytes", path, n, kMaxHeaderBytes);
  std::string header_text(n, '\0');
  read_at(fd, header_text.data(), n, 8, path);
  Json header;
  try {
    header = parse_json(header_text, path + " header");
  } catch (const Error& e) {
    fail("{}: corrupt safetensors file: {}", path, e.what());
  }
  PACKRAT_CHECK(header.is_object(), "{}: corrupt safetensors file: the header is not a JSON object", path);
  const int64_t data_start = static_cast<int64_t>(8 + n);
  const int64_t data_size = static_cast<int64_t>(file_size - 8 - n);

  SafetensorsFile out;
  struct Entry {
    int64_t begin, end;
    std::string name;
    DType dtype;
    std::vector<int64_t> dims;
  };
  std::vector<Entry> entries;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      PACKRAT_CHECK(e.is_object(), "{}: __metadata__ must be an object of strings", path);
      for (const auto& [k, v] : e.items()) {
        PACKRAT_CHECK(v.is_string(), "{}: __metadata__ value of '{}' is not a string", path, k);
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    try {
      PACKRAT_CHECK(e.is_object(), "entry is not an object");
      DType dt{};
      const std::string dtype = e.at("dtype").get<std::string>();
      PACKRAT_CHECK(parse_dtype(dtype, dt), "unsupported dtype '{}' (F32, F64, I64, I32, U8, BF16, F16)", dtype);
      std::vector<int64_t> dims;
      int64_t numel = 1;
      PACKRAT_CHECK(e.at("shape").is_array(), "shape is not an array");
      for (const Json& d : e.at("shape")) {
        const int64_t v = json_integer(d);
        PACKRAT_CHECK(v >= 0 && v < (int64_t{1} << 40), "bad dimension {}", v);
        dims.push_back(v);
        numel *= v;
        PACKRAT_CHECK(numel < (int64_t{1} << 40), "shape too large");
      }
      const Json& offs = e.at("data_offsets");
      PACKRAT_CHECK(offs.is_array() && offs.size() == 2, "data_offsets must be an array of 2 entries");
      const int64_t b = json_integer(offs[0]), en = json_integer(offs[1]);
      PACKRAT_CHECK(b >= 0 && b <= en && en <= data_size, "data_offsets [{}, {}] outside the {} data bytes", b, en,
                    data_size);
      PACKRAT_CHECK(en - b == numel * static_cast<int64_t>(dtype_size(dt)),
                    "{} bytes for a {} tensor of {} elements", en - b, dtype, numel);
      entries.push_back({b, en, name, dt, std::move(dims)});
    } catch (const Error& err) {
      fail("{}: corrupt safetensors file: tensor '{}': {}", path, name, err.what());
    } catch (const Json::exception& err) {  // a missing key or a value of the wrong type
      fail("{}: corrupt safetensors file: tensor '{}': {}", path, name, err.what());
    }
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  int64_t covered = 0;
  for (const Entry& s : entries) {
    PACKRAT_CHECK(s.begin == covered, "{}: corrupt safetensors file: tensor '{}' starts at byte {}, expected {} "
                                      "(overlapping or missing data)", path, s.name, s.begin, covered);
    covered = s.end;
  }
  PACKRAT_CHECK(covered == data_size, "{}: corrupt safetensors file: {} data bytes, the header describes {}", path,
                data_size, covered);
  for (Entry& s : entries) {
    Tensor t;
    bool allocated = false;
    try {
      t = Tensor::empty(Shape(s.dims), s.dtype, Layout::Plain, tag, Device::cpu());  // on the host: filled below
      allocated = true;
    } catch (const std::bad_alloc&) {
    } catch (const OutOfMemory&) {
    }
    PACKRAT_CHECK(allocated, "{}: out of memory reading tensor '{}' ({} bytes; the file holds {} bytes of tensors)",
                  path, s.name, s.end - s.begin, data_size);
    if (s.end > s.begin) read_at(fd, static_cast<char*>(t.raw()), static_cast<size_t>(s.end - s.begin), data_start + s.begin, path);
    out.tensors.emplace_back(std::move(s.name), std::move(t));
  }
  return out;
}

}  // namespace packrat
