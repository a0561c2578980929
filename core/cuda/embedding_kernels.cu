// The embedding kernels: the gather per index; the scatter-add without atomics: a stable radix
// sort of (id, position) pairs (CUB), then each run of equal ids summed in position order, so the
// weight gradient is deterministic and bit-identical to the CPU's.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>

#include "core/cuda/embedding_kernels.h"
#include "core/cuda/kernels/embedding.h"
#include "core/cuda/launch.cuh"

namespace packrat::cuda {

namespace {

// Only the bits below bit_width(num - 1) differ between valid ids: fewer radix passes.
int id_bits(int64_t num) { return std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(num > 1 ? num - 1 : 1)))); }

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The scratch: sorted ids, positions in, positions out (count each), then CUB's temporary storage.
struct SortScratch {
  int64_t *sorted_ids, *order_in, *order_out;
  void* cub_temp;
  size_t cub_bytes;
};

size_t cub_sort_bytes(int64_t count, int64_t num) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
                                  static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), count, 0,
                                  id_bits(num), nullptr);
  return bytes;
}

SortScratch carve(void* scratch, int64_t count, int64_t num) {
  auto* base = static_cast<char*>(scratch);
  const size_t run = aligned(static_cast<size_t>(count) * sizeof(int64_t));
  return {reinterpret_cast<int64_t*>(base), reinterpret_cast<int64_t*>(base + run),
          reinterpret_cast<int64_t*>(base + 2 * run), base + 3 * run, cub_sort_bytes(count, num)};
}

}  // namespace

void launch_embedding_forward(const float* weight, const int64_t* ids, float* y, unsigned long long* bad,
                              int64_t count, int64_t num, int64_t D) {
  const int64_t cols = D > 0 ? D : 1;
  launch_for_each(count * cols, EmbeddingGather{weight, ids, y, bad, num, D, cols});
}

size_t embedding_backward_scratch_bytes(int64_t count, int64_t num) {
  return 3 * aligned(static_cast<size_t>(count) * sizeof(int64_t)) + cub_sort_bytes(count, num);
}

void launch_embedding_backward(const float* grad, const int64_t* ids, float* dweight, void* scratch,
                               int64_t count, int64_t num, int64_t D) {
  cudaMemsetAsync(dweight, 0, static_cast<size_t>(num * D) * sizeof(float), nullptr);  // rows no id names
  if (count == 0 || D == 0) return;
  SortScratch s = carve(scratch, count, num);
  launch_for_each(count, Iota{s.order_in});
  cub::DeviceRadixSort::SortPairs(s.cub_temp, s.cub_bytes, ids, s.sorted_ids, s.order_in, s.order_out, count, 0,
                                  id_bits(num), nullptr);
  launch_for_each(count * D, EmbeddingSegmentSum{s.sorted_ids, s.order_out, grad, dweight, count, D});
}

}  // namespace packrat::cuda
