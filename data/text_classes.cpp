#include "data/text_classes.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "core/error.h"
#include "data/file_io.h"
#include "data/text.h"
#include "data/tokens.h"

namespace packrat::data {
namespace fs = std::filesystem;

namespace {

struct ClassFile {
  std::string name;
  fs::path path;
  std::vector<uint8_t> bytes;
};

// The class files directly in `root`, read (the text ones only), in file-name order.
std::vector<ClassFile> read_class_files(const fs::path& root, const std::string& key) {
  std::error_code ec;
  const fs::file_status st = fs::status(root, ec);
  PACKRAT_CHECK(!ec && fs::exists(st),
                "text_classes: {} '{}' does not exist (set it to a folder of fortune files, one class per file; "
                "Debian's packages fortunes and fortunes-min install {})",
                key, root.string(), kFortunesRoot);
  PACKRAT_CHECK(fs::is_directory(st), "text_classes: {} '{}' is not a folder (one fortune file per class in it)", key,
                root.string());
  std::vector<ClassFile> files;
  uintmax_t total = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(root))
    if (e.is_regular_file() && !e.is_symlink()) {
      files.push_back({e.path().filename().string(), e.path(), {}});
      total += e.file_size(ec);
    }
  PACKRAT_CHECK(total <= static_cast<uintmax_t>(kMaxTextBytes),
                "text_classes: {} '{}' holds {} bytes of files, more than the {} bytes (1 GiB) a text dataset reads "
                "into memory; use a folder of fewer files",
                key, root.string(), total, kMaxTextBytes);
  std::sort(files.begin(), files.end(), [](const ClassFile& a, const ClassFile& b) { return a.name < b.name; });
  std::vector<ClassFile> text;
  for (ClassFile& f : files) {
    try {
      f.bytes = read_file(f.path, "text_classes");
    } catch (const std::bad_alloc&) {
      fail("text_classes: {} '{}': out of memory reading {}", key, root.string(), f.path.string());
    }
    if (std::memchr(f.bytes.data(), 0, f.bytes.size()) == nullptr) text.push_back(std::move(f));
  }
  PACKRAT_CHECK(text.size() >= 2,
                "text_classes: {} '{}' holds {} class file(s) ({} regular file(s), the others binary: they hold a NUL "
                "byte); a classification needs at least 2 classes, one text file each{}",
                key, root.string(), text.size(), files.size(),
                root == fs::path(kFortunesRoot) ? " (Debian: apt-get install fortunes, beside fortunes-min)" : "");
  return text;
}

bool is_separator(const uint8_t* line, int64_t length) {
  return line[0] == '%' && (length == 1 || (length == 2 && line[1] == '\r'));
}

bool only_whitespace(const uint8_t* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::strchr(" \t\r\n\v\f", p[i]) == nullptr || p[i] == 0) return false;
  return true;
}

}  // namespace

std::vector<TextRecord> split_fortune_records(const std::vector<uint8_t>& bytes, const std::string& file) {
  const auto size = static_cast<int64_t>(bytes.size());
  const uint8_t* b = bytes.data();
  std::vector<TextRecord> out;
  // Closes the record whose lines are [start, stop) (stop: where the next `%` line or the file
  // begins or ends), first line `line`; no lines: no record.
  auto close = [&](int64_t start, int64_t stop, int64_t line) {
    if (stop <= start) return;
    const int64_t length = stop - start - (b[stop - 1] == '\n' ? 1 : 0);
    PACKRAT_CHECK(!only_whitespace(b + start, length),
                  "text_classes: {} line {}: record {} is empty (it holds only whitespace); remove it or give it text",
                  file, line, out.size() + 1);
    out.push_back({start, length, line});
  };
  int64_t start = 0, start_line = 1, line = 1;
  for (int64_t pos = 0; pos < size; ++line) {
    const auto* nl = static_cast<const uint8_t*>(std::memchr(b + pos, '\n', static_cast<size_t>(size - pos)));
    const int64_t end = nl != nullptr ? nl - b : size;  // the line is [pos, end)
    if (end > pos && is_separator(b + pos, end - pos)) {
      close(start, pos, start_line);
      start = std::min(end + 1, size);
      start_line = line + 1;
    }
    pos = end + 1;
  }
  close(start, size, start_line);
  return out;
}

bool is_test_record(int64_t r, int64_t records) { return r % 10 == 9 || (records < 10 && r == records - 1); }

std::vector<std::string> text_class_names(const fs::path& root, const std::string& key) {
  std::vector<std::string> names;
  for (const ClassFile& f : read_class_files(root, key)) names.push_back(f.name);
  return names;
}

TextClassesDataset::TextClassesDataset(std::string name, std::vector<std::string> classes, std::vector<uint8_t> bytes,
                                       std::vector<Sample> samples, int64_t seq_len, const std::string& seq_len_key)
    : name_(std::move(name)),
      classes_(std::move(classes)),
      bytes_(std::move(bytes)),
      samples_(std::move(samples)),
      seq_len_(seq_len) {
  PACKRAT_CHECK(seq_len_ >= 2, "{}: {} is {}; a text_classes sample needs at least 2 tokens (the class token and a byte)",
                name_, seq_len_key, seq_len_);
}

const TextClassesDataset::Sample& TextClassesDataset::sample(int64_t i) const {
  PACKRAT_CHECK(i >= 0 && i < size(), "{}: sample {} is out of range [0, {})", name_, i, size());
  return samples_[static_cast<size_t>(i)];
}

int64_t TextClassesDataset::get(int64_t i, uint8_t* chw) const {
  const Sample& s = sample(i);
  const int64_t n = std::min(s.length, seq_len_ - 1);
  chw[0] = kClsToken;
  std::memcpy(chw + 1, bytes_.data() + s.offset, static_cast<size_t>(n));
  std::memset(chw + 1 + n, kPadToken, static_cast<size_t>(seq_len_ - 1 - n));
  return s.label;
}

int64_t TextClassesDataset::label(int64_t i) const { return sample(i).label; }

std::shared_ptr<TextClassesDataset> load_text_classes(const fs::path& root, Split split, int64_t seq_len,
                                                      const std::string& root_key, const std::string& seq_len_key) {
  const std::vector<ClassFile> files = read_class_files(root, root_key);
  std::vector<std::string> classes;
  std::vector<uint8_t> bytes;
  std::vector<std::vector<TextClassesDataset::Sample>> by_class(files.size());  // the split's records of each class
  for (size_t c = 0; c < files.size(); ++c) {
    const ClassFile& f = files[c];
    classes.push_back(f.name);
    const std::vector<TextRecord> records = split_fortune_records(f.bytes, f.path.string());
    const auto count = static_cast<int64_t>(records.size());
    PACKRAT_CHECK(count >= 2,
                  "text_classes: {} holds {} record(s) (records are separated by lines holding just %); every class "
                  "needs at least 2, one to train on and one to test",
                  f.path.string(), count);
    for (int64_t r = 0; r < count; ++r) {
      if (is_test_record(r, count) != (split == Split::Test)) continue;
      const TextRecord& rec = records[static_cast<size_t>(r)];
      by_class[c].push_back({static_cast<int64_t>(bytes.size()), rec.length, static_cast<int64_t>(c)});
      for (int64_t k = 0; k < rec.length; ++k) {
        const uint8_t v = f.bytes[static_cast<size_t>(rec.offset + k)];
        bytes.push_back(v == kClsToken || v == kMaskToken ? uint8_t{'?'} : v);  // reserved tokens
      }
    }
  }
  // Interleaved: every class's first record, then every class's second, ...
  std::vector<TextClassesDataset::Sample> samples;
  size_t longest = 0;
  for (const auto& s : by_class) longest = std::max(longest, s.size());
  for (size_t k = 0; k < longest; ++k)
    for (const auto& s : by_class)
      if (k < s.size()) samples.push_back(s[k]);
  const char* which = split == Split::Train ? "train" : "test";
  return std::make_shared<TextClassesDataset>(fmt::format("text_classes {} {}", which, root.string()),
                                              std::move(classes), std::move(bytes), std::move(samples), seq_len,
                                              seq_len_key);
}

}  // namespace packrat::data
