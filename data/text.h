#pragma once
// Bytes of text as a next-byte prediction dataset (`data.dataset: text`).
//
//   root        a file, or a folder: every regular file under it, recursively, in path order,
//               concatenated; symbolic links are not followed and files holding a NUL byte
//               (binary files, such as the .dat indexes beside fortune files) are skipped.
//   split       deterministic: the first 90% of the bytes train, the last 10% validate
//               (Split::Test). No shuffling of text happens before the cut.
//   samples     a split of L bytes holds (L - 1) / seq_len windows; window i starts at byte
//               i * seq_len and holds seq_len + 1 bytes: tokens are its first seq_len bytes,
//               next-byte targets its last seq_len. Windows do not overlap (except for the one
//               byte shared as target of one and token of the next).
// The loader turns a batch of windows into tokens (N, T) i64 and targets (N, T) i64 (loader.h).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/cifar.h"  // Split
#include "data/dataset.h"

namespace packrat::data {

// The text under `root`, as described above. Errors name `key` (the config key of the root):
// a missing root, a folder without text files, an empty text, more than kMaxTextBytes of files
// (checked before anything is read).
std::vector<uint8_t> read_text_bytes(const std::filesystem::path& root, const std::string& key);

// The text is held in memory (and each split copied from it): 1 GiB of files at most.
constexpr int64_t kMaxTextBytes = int64_t{1} << 30;
constexpr int64_t kTextVocab = 256;           // one token per byte value
constexpr double kTextTrainFraction = 0.9;    // the first 90% of the bytes train

// Byte range [begin, end) of `split` in a text of `size` bytes.
std::pair<int64_t, int64_t> text_split_range(int64_t size, Split split);

// Sample i: tokens = window[0, T), targets = window[1, T + 1). As a Dataset (for the loader's
// bookkeeping, the memory report and messages) it is a set of (1, 1, T) "images" whose label is
// the byte after the window's last token.
class TextDataset : public Dataset {
 public:
  // Throws naming `seq_len_key` when seq_len < 1 or the split is too short for one window.
  TextDataset(std::string name, std::vector<uint8_t> bytes, int64_t seq_len, const std::string& seq_len_key);

  const std::string& name() const override { return name_; }
  int64_t size() const override { return windows_; }
  ImageShape image_shape() const override { return {1, 1, seq_len_}; }
  int64_t num_classes() const override { return kTextVocab; }
  const std::vector<std::string>& class_names() const override { return class_names_; }
  int64_t get(int64_t i, uint8_t* chw) const override;  // writes the T tokens
  int64_t label(int64_t i) const override;

  int64_t seq_len() const { return seq_len_; }
  int64_t bytes() const { return static_cast<int64_t>(bytes_.size()); }
  const uint8_t* window(int64_t i) const;  // seq_len + 1 bytes

 private:
  std::string name_;
  std::vector<uint8_t> bytes_;
  int64_t seq_len_ = 0, windows_ = 0;
  std::vector<std::string> class_names_;  // "0" .. "255"
};

}  // namespace packrat::data
