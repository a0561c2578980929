#pragma once
// MNIST-format IDX files (http://yann.lecun.com/exdb/mnist/), read straight from .gz with zlib.
// Header: two zero bytes, a type byte (0x08 = u8), the number of dimensions, then one big-endian
// u32 per dimension; the data follows, row-major. Images are idx3 (N, H, W), labels idx1 (N).
// Fashion-MNIST (the Debian package dataset-fashion-mnist) uses the same files and names.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/cifar.h"  // Split
#include "data/dataset.h"

namespace packrat::data {

struct IdxArray {
  std::vector<int64_t> dims;   // outermost first
  std::vector<uint8_t> data;   // product(dims) bytes
};

// Reads a u8 IDX file (.gz or plain). Throws naming the file on a bad magic number, a type other
// than u8, a rank other than `expected_rank`, a zero dimension, missing data (truncated) or
// bytes after the data.
IdxArray read_idx(const std::filesystem::path& path, int expected_rank, std::string_view who);

// The standard file names: train-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz, ...
std::filesystem::path idx_images_file(const std::filesystem::path& dir, Split split);
std::filesystem::path idx_labels_file(const std::filesystem::path& dir, Split split);

// Images (N, H, W) become (N, 1, H, W); the label count must equal the image count and every
// label must index `class_names`. `who` names the dataset and starts its messages ("fashion_mnist train").
std::shared_ptr<InMemoryDataset> load_idx_dataset(const std::filesystem::path& images,
                                                  const std::filesystem::path& labels,
                                                  std::vector<std::string> class_names, std::string who);

std::vector<std::string> fashion_mnist_class_names();
std::vector<std::string> mnist_class_names();  // "0".."9"

}  // namespace packrat::data
