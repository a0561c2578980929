#include "data/text.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "core/error.h"
#include "data/file_io.h"

namespace packrat::data {
namespace fs = std::filesystem;

namespace {
// Refuses text beyond kMaxTextBytes before it is read (a 10 GB file ended in std::bad_alloc).
void check_text_size(uintmax_t bytes, const fs::path& root, const std::string& key) {
  PACKRAT_CHECK(bytes <= static_cast<uintmax_t>(kMaxTextBytes),
                "text: {} '{}' holds {} bytes, more than the {} bytes (1 GiB) a text dataset reads into memory; use "
                "less text (a part of the file, or a folder of fewer files)",
                key, root.string(), bytes, kMaxTextBytes);
}

std::vector<uint8_t> read_text_file(const fs::path& file, const fs::path& root, const std::string& key) {
  try {
    return read_file(file, "text");
  } catch (const std::bad_alloc&) {
    fail("text: {} '{}': out of memory reading {}", key, root.string(), file.string());
  }
}
}  // namespace

std::vector<uint8_t> read_text_bytes(const fs::path& root, const std::string& key) {
  std::error_code ec;
  const fs::file_status st = fs::status(root, ec);
  PACKRAT_CHECK(!ec && fs::exists(st), "text: {} '{}' does not exist (set it to a text file or a folder of text files)",
                key, root.string());
  if (fs::is_regular_file(st)) {
    check_text_size(fs::file_size(root, ec), root, key);
    std::vector<uint8_t> bytes = read_text_file(root, root, key);
    PACKRAT_CHECK(!bytes.empty(), "text: {} '{}' is empty: there is no text to train on", key, root.string());
    return bytes;
  }
  PACKRAT_CHECK(fs::is_directory(st), "text: {} '{}' is neither a file nor a folder", key, root.string());
  std::vector<fs::path> files;
  uintmax_t total = 0;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && !e.is_symlink()) {
      files.push_back(e.path());
      total += e.file_size(ec);
    }
  check_text_size(total, root, key);
  std::sort(files.begin(), files.end());
  std::vector<uint8_t> text;
  int64_t binary = 0;
  for (const fs::path& f : files) {
    const std::vector<uint8_t> b = read_text_file(f, root, key);
    if (std::memchr(b.data(), 0, b.size()) != nullptr) {
      ++binary;
      continue;
    }
    try {
      text.insert(text.end(), b.begin(), b.end());
    } catch (const std::bad_alloc&) {
      fail("text: {} '{}': out of memory after {} bytes of text", key, root.string(), text.size());
    }
  }
  PACKRAT_CHECK(!text.empty(),
                "text: {} '{}' holds no text: {} regular file(s) found, {} skipped as binary (they hold a NUL byte), "
                "the others are empty",
                key, root.string(), files.size(), binary);
  return text;
}

std::pair<int64_t, int64_t> text_split_range(int64_t size, Split split) {
  const auto cut = static_cast<int64_t>(static_cast<double>(size) * kTextTrainFraction);
  return split == Split::Train ? std::pair{int64_t{0}, cut} : std::pair{cut, size};
}

TextDataset::TextDataset(std::string name, std::vector<uint8_t> bytes, int64_t seq_len, const std::string& seq_len_key)
    : name_(std::move(name)), bytes_(std::move(bytes)), seq_len_(seq_len) {
  PACKRAT_CHECK(seq_len_ >= 1, "{}: {} is {}; it must be at least 1", name_, seq_len_key, seq_len_);
  const auto size = static_cast<int64_t>(bytes_.size());
  PACKRAT_CHECK(size >= seq_len_ + 1,
                "{}: {} is {}, longer than the text: this split has {} bytes, and a sample needs seq_len + 1; use "
                "{} <= {} or more text",
                name_, seq_len_key, seq_len_, size, seq_len_key, std::max<int64_t>(size - 1, 0));
  windows_ = (size - 1) / seq_len_;
  for (int v = 0; v < kTextVocab; ++v) class_names_.push_back(std::to_string(v));
}

const uint8_t* TextDataset::window(int64_t i) const {
  PACKRAT_CHECK(i >= 0 && i < windows_, "{}: sample {} is out of range [0, {})", name_, i, windows_);
  return bytes_.data() + i * seq_len_;
}

int64_t TextDataset::get(int64_t i, uint8_t* chw) const {
  std::memcpy(chw, window(i), static_cast<size_t>(seq_len_));
  return label(i);
}

int64_t TextDataset::label(int64_t i) const { return window(i)[seq_len_]; }

}  // namespace packrat::data
