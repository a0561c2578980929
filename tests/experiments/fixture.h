#pragma once
// Test fixtures for the trainer: a tiny MNIST-format (IDX, gzipped) dataset in a temporary
// directory, and a small config that trains on it in well under a second per epoch.
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/philox.h"

namespace packrat::testing {

inline void write_idx_gz(const std::filesystem::path& path, const std::vector<uint32_t>& dims,
                         const std::vector<uint8_t>& data) {
  std::vector<uint8_t> bytes = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<uint8_t>(d >> s));
  bytes.insert(bytes.end(), data.begin(), data.end());
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

// n images of size x size in 10 classes: class k is a bright bar in row band k plus noise, so a
// small network learns it quickly. Files: <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz.
inline std::filesystem::path make_idx_dataset(const std::string& name, int64_t n_train, int64_t n_test,
                                              uint32_t size = 12) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("packrat_trainer_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  PhiloxStream rng(42, 7);
  auto make = [&](const std::string& prefix, int64_t n) {
    std::vector<uint8_t> images(static_cast<size_t>(n) * size * size), labels(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t k = static_cast<uint8_t>(rng.below(10));
      labels[static_cast<size_t>(i)] = k;
      for (uint32_t y = 0; y < size; ++y)
        for (uint32_t x = 0; x < size; ++x) {
          const bool bar = y * 10 / size == k;
          images[(static_cast<size_t>(i) * size + y) * size + x] =
              static_cast<uint8_t>((bar ? 180 : 20) + rng.below(60));
        }
    }
    write_idx_gz(dir / (prefix + "-images-idx3-ubyte.gz"), {static_cast<uint32_t>(n), size, size}, images);
    write_idx_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), {static_cast<uint32_t>(n)}, labels);
  };
  make("train", n_train);
  make("t10k", n_test);
  return dir;
}

}  // namespace packrat::testing
