// The CUDA embedding kernels' bodies (core/cuda/kernels/embedding.h), run on the host with no GPU
// against the CPU backend: the gather and its bad-id flag, and the deterministic scatter-add from
// ids sorted stably (std::stable_sort standing in for CUB's radix sort, which only a GPU runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/backend.h"
#include "core/cuda/kernels/embedding.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

using cuda::EmbeddingGather;
using cuda::EmbeddingSegmentSum;
using cuda::Iota;
using cuda::kNoBadIndex;
using testing::host_random;
using testing::run_on_host;

Tensor host_ids(const Shape& shape, const std::vector<int64_t>& v) {
  DeviceScope on_cpu(Device::cpu());
  Tensor t = Tensor::empty(shape, DType::i64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

TEST(CudaKernelsEmbedding, GatherMatchesTheCpuBackendAndFlagsTheFirstBadId) {
  DeviceScope on_cpu(Device::cpu());
  const int64_t num = 5, D = 7;
  const Tensor w = host_random({num, D}, 1);
  const std::vector<int64_t> idv{4, 0, 2, 2, 4, 1};
  const Tensor ids = host_ids({2, 3}, idv);
  const Tensor want = backend(Device::cpu()).embedding_forward(w, ids);
  Tensor y = Tensor::empty({2, 3, D});
  unsigned long long bad = kNoBadIndex;
  run_on_host(6 * D, EmbeddingGather{w.data<float>(), ids.data<int64_t>(), y.data<float>(), &bad, num, D, D});
  EXPECT_EQ(y.to_vector(), want.to_vector());
  EXPECT_EQ(bad, kNoBadIndex);

  const Tensor bad_ids = host_ids({2, 3}, {4, 0, 5, 2, -1, 1});  // positions 2 and 4
  run_on_host(6 * D, EmbeddingGather{w.data<float>(), bad_ids.data<int64_t>(), y.data<float>(), &bad, num, D, D});
  EXPECT_EQ(bad, 2u);
  for (int64_t j = 0; j < D; ++j) EXPECT_EQ(y.data<float>()[2 * D + j], 0.0f);  // nothing read outside weight
  // D = 0: one column per id, so ids are still checked.
  bad = kNoBadIndex;
  run_on_host(6, EmbeddingGather{w.data<float>(), bad_ids.data<int64_t>(), nullptr, &bad, num, 0, 1});
  EXPECT_EQ(bad, 2u);
}

TEST(CudaKernelsEmbedding, SortedSegmentSumIsTheCpuScatterAddBitForBit) {
  DeviceScope on_cpu(Device::cpu());
  const int64_t num = 9, D = 13, count = 40;
  std::vector<int64_t> idv(count);
  for (int64_t i = 0; i < count; ++i) idv[i] = (i * i * 7 + 3) % 6;  // repeats; rows 6..8 never named
  const Tensor ids = host_ids({count}, idv), g = host_random({count, D}, 2, -3.0f, 3.0f);
  const Tensor want = backend(Device::cpu()).embedding_backward(g, ids, num);

  std::vector<int64_t> order(count);
  run_on_host(count, Iota{order.data()});
  EXPECT_EQ(order[count - 1], count - 1);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return idv[a] < idv[b]; });
  std::vector<int64_t> sorted(count);
  for (int64_t k = 0; k < count; ++k) sorted[k] = idv[order[k]];
  std::vector<float> gw(static_cast<size_t>(num * D), 0.0f);
  run_on_host(count * D, EmbeddingSegmentSum{sorted.data(), order.data(), g.data<float>(), gw.data(), count, D});
  EXPECT_EQ(gw, want.to_vector());  // the same additions in the same order
}

}  // namespace
}  // namespace packrat
