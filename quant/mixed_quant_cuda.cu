// The mixed-precision bucket quantizer's CUDA kernels over the PACKRAT_HD helpers and bodies of
// mixed_quant_device.h, so that a GPU writes the CPU's bytes (same decisions, same Philox draws,
// same range and scale, same rounding and packing). Per-bucket widths make the code offsets
// data-dependent: they are an exclusive prefix sum of the bucket code bytes, computed on the
// device with CUB's DeviceScan.
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>

#include "core/cuda/launch.cuh"
#include "quant/apply_derivative_sink.h"
#include "quant/mixed_quant_device.h"
#include "quant/warp_range.cuh"

namespace packrat::cuda {

namespace {

const cudaStream_t kDefaultStream = nullptr;  // the legacy default stream, as every packrat kernel

size_t scan_bytes(int64_t buckets) {
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<int64_t*>(nullptr), buckets + 1, kDefaultStream);
  return bytes;
}

size_t count_bytes(int64_t buckets) {
  size_t bytes = 0;
  cub::DeviceReduce::Sum(nullptr, bytes, static_cast<const uint8_t*>(nullptr), static_cast<int64_t*>(nullptr), buckets,
                         kDefaultStream);
  return bytes;
}

// The bucket's sign-magnitude scale, before rounding to the metadata, by the whole warp:
// bucket_scale_ref's value. max|x| combines in any order (NaN ignored); the L2 sum of squares
// keeps the canonical order: lane l < 16 makes lane sum l, every lane adds the 16 in order
// (shuffled), then the remaining elements.
__device__ float warp_bucket_scale(const float* x, int64_t len, ScaleRule rule, int lane) {
  float amax = 0.0f;
  for (int64_t i = lane; i < len; i += 32) amax = max_abs_step(amax, fabsf(x[i]));
  for (int offset = 16; offset > 0; offset /= 2) amax = max_abs_step(amax, __shfl_xor_sync(kFullWarp, amax, offset));
  if (rule != ScaleRule::L2) return amax;
  const int64_t lanes_end = l2_lanes_end(len);
  const float mine = lane < 16 ? l2_lane_sum(x, lanes_end, lane) : 0.0f;
  float total = 0.0f;
  for (int l = 0; l < 16; ++l) {
    const float s = __shfl_sync(kFullWarp, mine, l);
    if (lanes_end) total += s;
  }
  return l2_scale_finish(total, x, len, amax);
}

constexpr int kWarpsPerBlock = kThreadsPerBlock / 32;
// Blocks of 8 a lane keeps in registers from the range to its codes: buckets of up to 512 values
// (the thesis's) are read once, a float4 a load (before: a strided scan of single floats for the
// range, then every block again for the codes).
constexpr int kBucketLaneBlocks = 2;

// One warp per bucket: its grid (range or scale), its metadata record, then its blocks of 8
// codes across the lanes, 32 consecutive blocks (a pass) at a time, lane l on blocks l, l + 32,
// ... Every lane computes the same grid, so none is broadcast. Stochastic rounding: each lane
// makes one Philox call per pass and the lanes share the outputs through shared memory
// (warp_noise_counter and friends: the uniforms of rounding_uniform, 8x fewer Philox calls than
// one per element).
__global__ void quantize_mixed_kernel(const float* x, MixedFormat f, Rounding rounding, QuantNoise noise,
                                      BucketFlags flags, BucketOffsets offsets, uint8_t* codes, uint8_t* meta) {
  __shared__ uint32_t philox_words[kWarpsPerBlock][32][4];  // (warps, lanes, words): each warp's Philox outputs
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int64_t g = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (g >= f.g.buckets) return;  // the whole warp: one bucket per warp
  const int64_t len = f.g.len(g);
  const float* xb = x + f.g.start(g);  // (len)
  float v[kBucketLaneBlocks][8];       // the lane's blocks of the first passes (past n[i]: not read)
  int n[kBucketLaneBlocks];            // their lengths (0: none)
#pragma unroll
  for (int i = 0; i < kBucketLaneBlocks; ++i) {
    n[i] = block8_len(len, lane + 32 * i);
    load_floats8(xb + 8 * (lane + 32 * i), n[i], v[i]);
  }
  const BucketWidth w = flags(g) ? f.mix : f.base;
  BucketGrid grid;
  if (!is_sign_magnitude(f.scale)) {
    float mn, mx;
    warp_range(xb, len, lane, v, n, mn, mx);
    grid = affine_grid(group_params(mn, mx, w.bits, f.meta));
  } else {
    grid = sign_magnitude_grid(sign_magnitude_scale(warp_bucket_scale(xb, len, f.scale, lane), f.meta), w.levels);
  }
  if (lane == 0) store_bucket_meta(grid, f.scale, f.meta, meta + g * bucket_meta_bytes(f.scale, f.meta));
  const uint64_t stream = bucket_stream(noise.stream, static_cast<uint64_t>(g));
  const bool stochastic = rounding == Rounding::Stochastic;
  uint8_t* dst = codes + offsets(g);
  uint32_t(*shared_words)[4] = philox_words[warp];
  // The pass from block `first` (a multiple of 32; the same on every lane): the lane's block
  // first + lane, its m values vals.
  auto quantize_pass = [&](int64_t first, const float* vals, int m) {
    float r[8];
    if (stochastic) {
      uint32_t words[4];
      Philox4x32::generate(noise.seed, stream, warp_noise_counter(first, lane), words);
      __syncwarp();  // the last pass's reads are done
      for (int j = 0; j < 4; ++j) shared_words[lane][j] = words[j];
      __syncwarp();
      const int h = warp_noise_half(lane);
      for (int k = 0; k < 8; ++k) r[k] = uniform16(philox_half_word(shared_words[warp_noise_source(lane, k)], h));
    } else {
      for (int k = 0; k < 8; ++k) r[k] = 0.5f;
    }
    if (m > 0) quantize_bucket_block8_with(vals, m, len, first + lane, w, f.scale, r, grid, dst);
  };
#pragma unroll
  for (int i = 0; i < kBucketLaneBlocks; ++i)
    if (8 * 32 * i < len) quantize_pass(32 * i, v[i], n[i]);
  for (int64_t first = 32 * kBucketLaneBlocks; 8 * first < len; first += 32) {  // buckets over 512 values only
    float u[8];
    const int m = block8_len(len, first + lane);
    load_floats8(xb + 8 * (first + lane), m, u);
    quantize_pass(first, u, m);
  }
}

}  // namespace

size_t mixed_scan_scratch_bytes(int64_t buckets) { return std::max(scan_bytes(buckets), count_bytes(buckets)); }

void launch_decide_buckets(const MixedQuantConfig& c, const BucketGeometry& g, const QuantNoise& noise, uint8_t* flags,
                           int64_t* offsets, int64_t* totals, void* scratch, size_t scratch_bytes) {
  launch_for_each(g.buckets + 1, DecideBucketsBody{c, g, noise, flags, offsets});
  size_t bytes = scratch_bytes;
  cub::DeviceScan::ExclusiveSum(scratch, bytes, offsets, g.buckets + 1, kDefaultStream);  // in place: bytes -> offsets
  cudaMemcpyAsync(totals, offsets + g.buckets, sizeof(int64_t), cudaMemcpyDeviceToDevice, kDefaultStream);
  bytes = scratch_bytes;
  cub::DeviceReduce::Sum(scratch, bytes, static_cast<const uint8_t*>(flags), totals + 1, g.buckets,
                         kDefaultStream);  // int64 accumulator: the output's type
}

void launch_pack_flags(const uint8_t* flags, int64_t buckets, uint8_t* packed) {
  launch_for_each(packed_bytes(buckets, 1), PackFlagsBody{flags, buckets, packed});
}

void launch_code_offsets(const MixedFormat& f, const BucketFlags& flags, int64_t* offsets, void* scratch,
                         size_t scratch_bytes) {
  launch_for_each(f.g.buckets + 1, BucketBytesBody{f, flags, offsets});
  size_t bytes = scratch_bytes;
  cub::DeviceScan::ExclusiveSum(scratch, bytes, offsets, f.g.buckets + 1, kDefaultStream);
}

void launch_quantize_mixed(const float* x, const MixedFormat& f, Rounding rounding, const QuantNoise& noise,
                           const BucketFlags& flags, const BucketOffsets& offsets, uint8_t* codes, uint8_t* meta) {
  if (f.g.buckets == 0) return;
  const int64_t blocks = (f.g.buckets + kWarpsPerBlock - 1) / kWarpsPerBlock;
  quantize_mixed_kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock>>>(x, f, rounding, noise, flags, offsets,
                                                                             codes, meta);
}

void launch_dequantize_mixed(const uint8_t* codes, const uint8_t* meta, const MixedFormat& f, const BucketFlags& flags,
                             const BucketOffsets& offsets, float* out) {
  launch_for_each_lane(f.g.buckets, lanes_log2(dequantize_lanes(f.g.bucket_size)),
                       DequantizeBucketQuadsBody<>{codes, meta, f, flags, offsets, StoreValues{out}});
}

void launch_dequantize_mixed_apply(const uint8_t* codes, const uint8_t* meta, const MixedFormat& f,
                                   const BucketFlags& flags, const BucketOffsets& offsets, ActivationId fn,
                                   bool from_output, const float* grad, float* gx) {
  const int lane_shift = lanes_log2(dequantize_lanes(f.g.bucket_size));
  with_apply_derivative(fn, from_output, grad, gx, [&](auto sink) {
    launch_for_each_lane(f.g.buckets, lane_shift,
                         DequantizeBucketQuadsBody<decltype(sink)>{codes, meta, f, flags, offsets, sink});
  });
}

}  // namespace packrat::cuda
