#pragma once
// CIFAR-10 and CIFAR-100 in their official binary format (https://www.cs.toronto.edu/~kriz/cifar.html).
//   CIFAR-10:  <dir>/data_batch_{1..5}.bin (train), <dir>/test_batch.bin (test), batches.meta.txt;
//              a record is <1 byte label><3072 bytes: 1024 R, 1024 G, 1024 B, rows of 32>.
//   CIFAR-100: <dir>/train.bin, <dir>/test.bin, fine_label_names.txt, coarse_label_names.txt;
//              a record is <1 byte coarse label><1 byte fine label><3072 bytes as above>.
// The pixel block is already (C, H, W), so images are copied as they lie.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace packrat::data {

enum class Split { Train, Test };
enum class Cifar100Label { Fine, Coarse };

// The files of a split inside an extracted directory (cifar-10-batches-bin/ or cifar-100-binary/).
std::vector<std::filesystem::path> cifar10_files(const std::filesystem::path& dir, Split split);
std::filesystem::path cifar100_file(const std::filesystem::path& dir, Split split);

// Reads the given record files (in order). Throws naming the file when a file is missing,
// empty, truncated (not a whole number of records) or holds a label out of range.
std::shared_ptr<InMemoryDataset> load_cifar10(const std::filesystem::path& dir, Split split);
std::shared_ptr<InMemoryDataset> load_cifar100(const std::filesystem::path& dir, Split split, Cifar100Label label);

// Class names: from batches.meta.txt / *_label_names.txt when present, else the published names
// (CIFAR-10) or "fine_17" / "coarse_3" (CIFAR-100).
std::vector<std::string> cifar10_class_names(const std::filesystem::path& dir);
std::vector<std::string> cifar100_class_names(const std::filesystem::path& dir, Cifar100Label label);

constexpr int64_t kCifarImageBytes = 3 * 32 * 32;

}  // namespace packrat::data
