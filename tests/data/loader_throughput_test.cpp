// Loader throughput on the real Fashion-MNIST train set and on CIFAR-shaped synthetic data
// (disabled: they measure, they do not check).
//   OMP_NUM_THREADS=2 build/bin/packrat_tests --gtest_also_run_disabled_tests --gtest_filter='DataLoaderThroughput.*'
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "data/idx.h"
#include "data/loader.h"
#include "data/registry.h"

using namespace packrat::data;

namespace {

// One epoch, consumed as fast as it comes: images per second.
double epoch_rate(std::shared_ptr<Dataset> ds, const std::vector<std::string>& transforms, int threads) {
  Loader l(ds, parse_pipeline(transforms), {.batch_size = 128, .seed = 1, .threads = threads});
  const auto t0 = std::chrono::steady_clock::now();
  l.start_epoch(0);
  int64_t n = 0;
  for (Batch b; l.next(b);) n += b.images.dim(0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(n) / s;
}

}  // namespace

TEST(DataLoaderThroughput, DISABLED_FashionMnistWithTransforms) {
  if (!std::filesystem::exists(idx_images_file(default_root("fashion_mnist"), Split::Train)))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto ds = open_dataset({.name = "fashion_mnist"});
  const std::vector<std::string> aug = {"random_crop(28, 2)", "hflip", "normalize(fashion_mnist)"};
  const double plain = epoch_rate(ds, {}, 1);
  const double one = epoch_rate(ds, aug, 1);
  const double two = epoch_rate(ds, aug, 2);
  std::printf("fashion_mnist train, batch 128, one epoch of 60000 images:\n"
              "  to_float only, 1 thread:               %9.0f images/s\n"
              "  crop+flip+normalize, 1 thread:         %9.0f images/s (%.2f of to_float only)\n"
              "  crop+flip+normalize, 2 threads:        %9.0f images/s\n",
              plain, one, one / plain, two);
}

TEST(DataLoaderThroughput, DISABLED_CifarShapedWithTransforms) {
  const int64_t n = 50000;
  std::vector<uint8_t> px(static_cast<size_t>(n * 3072));  // (N, 3, 32, 32)
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  std::vector<int64_t> labels(static_cast<size_t>(n));      // (N)
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 10;
  auto ds = std::make_shared<InMemoryDataset>("synthetic cifar", ImageShape{3, 32, 32},
                                              std::vector<std::string>(10, "c"), std::move(px), std::move(labels));
  const std::vector<std::string> aug = {"random_crop(32, 4)", "hflip", "normalize(cifar10)"};
  const double plain = epoch_rate(ds, {}, 1);
  const double one = epoch_rate(ds, aug, 1);
  const double two = epoch_rate(ds, aug, 2);
  std::printf("cifar-shaped (3, 32, 32), batch 128, one epoch of 50000 images:\n"
              "  to_float only, 1 thread:               %9.0f images/s\n"
              "  crop+flip+normalize, 1 thread:         %9.0f images/s (%.2f of to_float only)\n"
              "  crop+flip+normalize, 2 threads:        %9.0f images/s\n",
              plain, one, one / plain, two);
}
