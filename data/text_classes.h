#pragma once
// Text classification over a folder of fortune files (`data.dataset: text_classes`; default root
// /usr/share/games/fortunes, Debian's `fortunes` and `fortunes-min`: art, computers, food, goedel,
// riddles, science, startrek, ...).
//
//   classes   every regular file directly in the root is one class, named by its file name, the
//             classes in file-name order. Symbolic links (fortune's .u8 links) and files holding a
//             NUL byte (fortune's .dat indexes) are skipped, and sub-folders are not read. Fewer
//             than 2 classes is an error naming the root's key.
//   records   lines holding just `%` (or `%\r`) separate a file's records, as fortune's strfile
//             reads them. A `%` line right after another one, or first or last in the file,
//             separates nothing: no record (strfile skips them as well; Debian's knghtbrd and tao
//             have such lines). A record holding only whitespace is an error naming the file and
//             the line where the record starts; so is a class of fewer than 2 records (one to
//             train on, one to test).
//   split     deterministic, by record: record r (0-based, in file order) of a class of R records
//             is a test record when r % 10 == 9, and when R < 10 the class's last record is too,
//             so that every class is in both splits (about 10% of the records test).
//   order     samples interleave the classes: every class's first record of the split, in class
//             order, then every class's second, ...; so data.limit_train / data.limit_test keep
//             every class as far as they can.
//   tokens    sample i is kClsToken, then its record's bytes (a 0x01 or 0x02 byte, a reserved token
//             of data/tokens.h, read as '?'), truncated to seq_len tokens in all and padded with
//             kPadToken to seq_len; its label is the class index.
// As a Dataset (for the loader's bookkeeping, the memory report and messages) a sample is a
// (1, 1, T) "image" of token bytes; the loader turns a batch into tokens (N, T) i64 and labels
// (N) i64 (loader.h).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/cifar.h"  // Split
#include "data/dataset.h"

namespace packrat::data {

constexpr const char* kFortunesRoot = "/usr/share/games/fortunes";

// A record within a file's bytes: [offset, offset + length), starting at 1-based line `line`.
struct TextRecord {
  int64_t offset = 0, length = 0, line = 0;
};

// The records of one fortune file's bytes, as described above (the record's bytes exclude the
// newline before its closing `%` line). Throws naming `file` and the line of a whitespace-only record.
std::vector<TextRecord> split_fortune_records(const std::vector<uint8_t>& bytes, const std::string& file);

// Whether record r of a class of `records` records belongs to the test split.
bool is_test_record(int64_t r, int64_t records);

// The class files directly in `root` (file names, sorted). Errors name `key`: a missing root, a
// root that is no folder, fewer than 2 class files, more than kMaxTextBytes of files.
std::vector<std::string> text_class_names(const std::filesystem::path& root, const std::string& key);

class TextClassesDataset : public Dataset {
 public:
  struct Sample {
    int64_t offset = 0, length = 0;  // the record's bytes in bytes()
    int64_t label = 0;
  };
  // Throws naming `seq_len_key` when seq_len < 2 (the class token and one byte).
  TextClassesDataset(std::string name, std::vector<std::string> classes, std::vector<uint8_t> bytes,
                     std::vector<Sample> samples, int64_t seq_len, const std::string& seq_len_key);

  const std::string& name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  ImageShape image_shape() const override { return {1, 1, seq_len_}; }
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  const std::vector<std::string>& class_names() const override { return classes_; }
  int64_t get(int64_t i, uint8_t* chw) const override;  // writes the T tokens
  int64_t label(int64_t i) const override;

  int64_t seq_len() const { return seq_len_; }
  const Sample& sample(int64_t i) const;

 private:
  std::string name_;
  std::vector<std::string> classes_;
  std::vector<uint8_t> bytes_;    // the split's records, back to back, 0x01 / 0x02 already '?'
  std::vector<Sample> samples_;   // in the interleaved order
  int64_t seq_len_ = 0;
};

// The `split` of the fortune files under `root` (errors name `root_key`, `seq_len_key` and the files).
std::shared_ptr<TextClassesDataset> load_text_classes(const std::filesystem::path& root, Split split, int64_t seq_len,
                                                      const std::string& root_key, const std::string& seq_len_key);

}  // namespace packrat::data
