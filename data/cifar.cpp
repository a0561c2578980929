#include "data/cifar.h"

#include <cstring>

#include "core/error.h"
#include "data/file_io.h"

namespace packrat::data {
namespace fs = std::filesystem;

namespace {

// Appends every record of one file; `label_bytes` leading bytes per record, `label_at` picks one.
void read_records(const fs::path& file, const char* who, int64_t label_bytes, int64_t label_at, int64_t num_classes,
                  std::vector<uint8_t>& pixels, std::vector<int64_t>& labels) {
  const std::vector<uint8_t> bytes = read_file(file, who);
  const int64_t record = label_bytes + kCifarImageBytes;
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size == 0) fail("{}: {} is empty", who, file.string());
  if (size % record != 0)
    fail("{}: {} is truncated: {} bytes of record {} missing (records are {} bytes, the file has {})", who,
         file.string(), record - size % record, size / record, record, size);
  const int64_t n = size / record;
  const size_t first = pixels.size();
  pixels.resize(first + static_cast<size_t>(n * kCifarImageBytes));
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = bytes.data() + r * record;
    for (int64_t b = 0; b < label_bytes; ++b) {
      // Every label byte is checked, also the one not used (a corrupt file shows there too).
      const int64_t classes = label_bytes == 1 ? num_classes : (b == 0 ? 20 : 100);
      if (rec[b] >= classes)
        fail("{}: {} is corrupt: record {} has {}label {}, expected 0..{}", who, file.string(), r,
             label_bytes == 1 ? "" : (b == 0 ? "coarse " : "fine "), rec[b], classes - 1);
    }
    labels.push_back(rec[label_at]);
    std::memcpy(pixels.data() + first + r * kCifarImageBytes, rec + label_bytes, kCifarImageBytes);
  }
}

}  // namespace

std::vector<fs::path> cifar10_files(const fs::path& dir, Split split) {
  if (split == Split::Test) return {dir / "test_batch.bin"};
  std::vector<fs::path> files;
  for (int i = 1; i <= 5; ++i) files.push_back(dir / fmt::format("data_batch_{}.bin", i));
  return files;
}

fs::path cifar100_file(const fs::path& dir, Split split) { return dir / (split == Split::Train ? "train.bin" : "test.bin"); }

std::vector<std::string> cifar10_class_names(const fs::path& dir) {
  const fs::path meta = dir / "batches.meta.txt";
  if (fs::exists(meta)) {
    auto names = read_lines(meta, "cifar10");
    if (names.size() != 10) fail("cifar10: {} lists {} class names, expected 10", meta.string(), names.size());
    return names;
  }
  return {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
}

std::vector<std::string> cifar100_class_names(const fs::path& dir, Cifar100Label label) {
  const bool fine = label == Cifar100Label::Fine;
  const size_t n = fine ? 100 : 20;
  const fs::path meta = dir / (fine ? "fine_label_names.txt" : "coarse_label_names.txt");
  if (fs::exists(meta)) {
    auto names = read_lines(meta, "cifar100");
    if (names.size() != n) fail("cifar100: {} lists {} class names, expected {}", meta.string(), names.size(), n);
    return names;
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i) names.push_back(fmt::format("{}_{}", fine ? "fine" : "coarse", i));
  return names;
}

std::shared_ptr<InMemoryDataset> load_cifar10(const fs::path& dir, Split split) {
  std::vector<uint8_t> pixels;  // (N, 3, 32, 32)
  std::vector<int64_t> labels;  // (N)
  for (const fs::path& f : cifar10_files(dir, split)) read_records(f, "cifar10", 1, 0, 10, pixels, labels);
  return std::make_shared<InMemoryDataset>(split == Split::Train ? "cifar10 train" : "cifar10 test",
                                           ImageShape{3, 32, 32}, cifar10_class_names(dir), std::move(pixels),
                                           std::move(labels));
}

std::shared_ptr<InMemoryDataset> load_cifar100(const fs::path& dir, Split split, Cifar100Label label) {
  std::vector<uint8_t> pixels;  // (N, 3, 32, 32)
  std::vector<int64_t> labels;  // (N)
  const bool fine = label == Cifar100Label::Fine;
  read_records(cifar100_file(dir, split), "cifar100", 2, fine ? 1 : 0, fine ? 100 : 20, pixels, labels);
  return std::make_shared<InMemoryDataset>(
      fmt::format("cifar100 {} ({} labels)", split == Split::Train ? "train" : "test", fine ? "fine" : "coarse"),
      ImageShape{3, 32, 32}, cifar100_class_names(dir, label), std::move(pixels), std::move(labels));
}

}  // namespace packrat::data
