// Loader throughput: one epoch, batch 128, consumed as fast as it comes, in images per second,
// with no transform but to_float (threads 1) and with crop+flip+normalize (threads 1 and 2); on
// the real Fashion-MNIST train set (skipped when dataset-fashion-mnist is not installed) and on
// CIFAR-shaped synthetic data (50000 x (3, 32, 32)).
//
//   OMP_NUM_THREADS=2 build/bin/packrat_bench --benchmark_filter='Loader'
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/idx.h"
#include "data/loader.h"
#include "data/registry.h"

namespace packrat::data {
namespace {

// One epoch: images per second.
double epoch_rate(std::shared_ptr<Dataset> ds, const std::vector<std::string>& transforms, int threads) {
  Loader l(ds, parse_pipeline(transforms), {.batch_size = 128, .seed = 1, .threads = threads});
  const auto t0 = std::chrono::steady_clock::now();
  l.start_epoch(0);
  int64_t n = 0;
  for (Batch b; l.next(b);) n += b.images.dim(0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(n) / s;
}

void report(benchmark::State& state, std::shared_ptr<Dataset> ds, const std::vector<std::string>& aug) {
  double plain = 0, one = 0, two = 0;
  for (auto _ : state) {
    plain = epoch_rate(ds, {}, 1);
    one = epoch_rate(ds, aug, 1);
    two = epoch_rate(ds, aug, 2);
  }
  state.counters["to_float_1thread_img_per_s"] = plain;
  state.counters["augmented_1thread_img_per_s"] = one;
  state.counters["augmented_2threads_img_per_s"] = two;
  state.counters["augmented_over_to_float"] = one / plain;
}

void BM_LoaderFashionMnistWithTransforms(benchmark::State& state) {
  if (!std::filesystem::exists(idx_images_file(default_root("fashion_mnist"), Split::Train))) {
    state.SkipWithError("dataset-fashion-mnist is not installed");
    for (auto _ : state) {
    }
    return;
  }
  report(state, open_dataset({.name = "fashion_mnist"}), {"random_crop(28, 2)", "hflip", "normalize(fashion_mnist)"});
}

void BM_LoaderCifarShapedWithTransforms(benchmark::State& state) {
  const int64_t n = 50000;
  std::vector<uint8_t> px(static_cast<size_t>(n * 3072));  // (N, 3, 32, 32)
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  std::vector<int64_t> labels(static_cast<size_t>(n));      // (N)
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 10;
  auto ds = std::make_shared<InMemoryDataset>("synthetic cifar", ImageShape{3, 32, 32},
                                              std::vector<std::string>(10, "c"), std::move(px), std::move(labels));
  report(state, ds, {"random_crop(32, 4)", "hflip", "normalize(cifar10)"});
}

BENCHMARK(BM_LoaderFashionMnistWithTransforms)->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_LoaderCifarShapedWithTransforms)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace packrat::data
