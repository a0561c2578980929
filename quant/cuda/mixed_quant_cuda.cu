// The mixed-precision bucket quantizer's CUDA kernels over the PACKRAT_HD helpers and bodies of
// mixed_quant_device.h, so that a GPU writes the CPU's bytes (same decisions, same noise words,
// same range and scale, same rounding and packing). Per-bucket widths make the code offsets
// data-dependent: they are an exclusive prefix sum of the bucket code bytes, computed on the
// device with CUB's DeviceScan. A GPU's NHWC tensor is walked in its logical order, one pass each
// way (quant/mixed/nhwc_buckets.h).
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>

#include "core/cuda/launch.cuh"
#include "quant/cuda/launchers.h"
#include "quant/codec/apply_derivative_sink.h"
#include "quant/mixed/mixed_kernel_bodies.h"
#include "quant/mixed/nhwc_buckets.h"
#include "quant/cuda/warp_range.cuh"

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

// One bucket, g, by the whole warp: its grid (range or scale), its metadata record, then its
// blocks of 8 codes across the lanes, 32 consecutive blocks (a pass) at a time, lane l on blocks
// l, l + 32, ... Every lane computes the same grid, so none is broadcast. Stochastic rounding:
// each lane hashes its own block's four noise words (block8_noise: the uniforms of rounding_uniform,
// two elements a word). xb: the bucket's values, in global memory or a block's tile.
__device__ void quantize_bucket_by_warp(const float* xb, int64_t g, const MixedFormat& f, Rounding rounding,
                                        const QuantNoise& noise, const BucketFlags& flags,
                                        const BucketOffsets& offsets, uint8_t* codes, uint8_t* meta, int lane) {
  const int64_t len = f.g.len(g);
  float v[kBucketLaneBlocks][8];  // the lane's blocks of the first passes (past n[i]: not read)
  int n[kBucketLaneBlocks];       // their lengths (0: none)
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
  const NoiseKey key = noise_key(noise.seed, bucket_stream(noise.stream, static_cast<uint64_t>(g)));
  const bool stochastic = rounding == Rounding::Stochastic;
  uint8_t* dst = codes + offsets(g);
  // The pass from block `first` (a multiple of 32; the same on every lane): the lane's block
  // first + lane, its m values vals.
  auto quantize_pass = [&](int64_t first, const float* vals, int m) {
    float r[8];
    if (stochastic) {
      uint32_t half[8];
      block8_noise(key, static_cast<uint64_t>(first + lane), half);
      for (int k = 0; k < 8; ++k) r[k] = uniform16(half[k]);
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

// A plain tensor: one warp per bucket, read where it lies.
__global__ void quantize_mixed_kernel(const float* x, MixedFormat f, Rounding rounding, QuantNoise noise,
                                      BucketFlags flags, BucketOffsets offsets, uint8_t* codes, uint8_t* meta) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t g = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (g >= f.g.buckets) return;  // the whole warp: one bucket per warp
  quantize_bucket_by_warp(x + f.g.start(g), g, f, rounding, noise, flags, offsets, codes, meta, lane);
}

// An NHWC tensor (walk) in plain order (quant/mixed/nhwc_buckets.h): the block's buckets staged into
// shared memory, then quantized there by its warps in turn (per_block of them, a tile's worth).
__global__ void __launch_bounds__(kNhwcBlockThreads)
    quantize_mixed_nhwc_kernel(const float* x, MixedFormat f, Rounding rounding, QuantNoise noise, BucketFlags flags,
                               BucketOffsets offsets, uint8_t* codes, uint8_t* meta, CodecWalk walk,
                               int64_t per_block) {
  constexpr int kWarps = kNhwcBlockThreads / 32;
  extern __shared__ float4 staged_run[];            // (the block's run, plain order) at most kNhwcTileFloats
  float* tile = reinterpret_cast<float*>(staged_run);
  const int t = static_cast<int>(threadIdx.x), lane = t % 32, warp = t / 32;
  const NhwcBlock b = nhwc_bucket_block(f.g, per_block, blockIdx.x);
  nhwc_stage(walk, b.run, x, tile, t, kNhwcBlockThreads);
  __syncthreads();
  for (int64_t g = b.first + warp; g < b.first + b.count; g += kWarps)  // the same trip count on a warp's lanes
    quantize_bucket_by_warp(tile + (f.g.start(g) - b.run.begin), g, f, rounding, noise, flags, offsets, codes, meta, lane);
}

// One block's buckets of an NHWC tensor decoded straight into NHWC (quant/mixed/nhwc_buckets.h): their
// codes copied into shared memory beside a table of their widths and grids, then each thread's
// tiles of 4 pixels x 4 channels (kQuads: nhwc_decode_run_quads, where
// nhwc_buckets_quad_decodable), else its quads of channels one value at a time, decoded and
// handed to the sink (the values, or an activation's backward against the NHWC gradient). On an
// H100 (CodecCuda/MixedNhwc, side by side in one run) the tiles decode at 0.67 of copy bandwidth
// against 0.35 value by value, a GELU's backward at 0.57 against 0.40. Two blocks an SM: ptxas
// then keeps the value-by-value decode in 93 registers and an activation's in 128, without spills
// (left to itself it gave the values' decode 80 registers and spilled 140 bytes a thread).
template <class Sink, bool kQuads>
__global__ void __launch_bounds__(kNhwcBlockThreads, 2)
    decode_buckets_nhwc_kernel(NhwcBucketSource src, CodecWalk walk, int64_t per_block, Sink sink) {
  __shared__ __align__(16) uint8_t block_codes[kNhwcCodeBytes];             // from the rounded first code byte
  __shared__ __align__(16) NhwcBucketEntry block_buckets[kNhwcBucketTable];  // (the block's buckets,)
  const int t = static_cast<int>(threadIdx.x);
  const NhwcBlock b = nhwc_bucket_block(src.f.g, per_block, blockIdx.x);
  const NhwcBucketDecoder decode = nhwc_bucket_block_phase(src, b, block_codes, block_buckets, t, kNhwcBlockThreads);
  __syncthreads();
  if constexpr (kQuads)
    nhwc_decode_run_quads(walk, b.run, decode, sink, t, kNhwcBlockThreads);
  else
    nhwc_decode_run(walk, b.run, decode, sink, t, kNhwcBlockThreads);
}

template <class Sink>
void launch_decode_nhwc(const uint8_t* codes, const uint8_t* meta, const MixedFormat& f, const BucketFlags& flags,
                        const BucketOffsets& offsets, const CodecWalk& walk, const Sink& sink) {
  const int64_t per_block = nhwc_decode_block_buckets(f);
  const auto blocks = static_cast<unsigned>((f.g.buckets + per_block - 1) / per_block);
  const NhwcBucketSource src = nhwc_bucket_source(codes, meta, f, flags, offsets);
  if (nhwc_buckets_quad_decodable(f.g, walk))
    return decode_buckets_nhwc_kernel<Sink, true><<<blocks, kNhwcBlockThreads>>>(src, walk, per_block, sink);
  decode_buckets_nhwc_kernel<Sink, false><<<blocks, kNhwcBlockThreads>>>(src, walk, per_block, sink);
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
                           const BucketFlags& flags, const BucketOffsets& offsets, uint8_t* codes, uint8_t* meta,
                           const CodecWalk& walk) {
  if (f.g.buckets == 0) return;
  if (walk.nhwc) {
    const int64_t per_block = nhwc_quantize_block_buckets(f.g);
    const auto blocks = static_cast<unsigned>((f.g.buckets + per_block - 1) / per_block);
    const size_t tile_bytes = static_cast<size_t>(per_block * f.g.bucket_size) * sizeof(float);  // under 48 KiB
    quantize_mixed_nhwc_kernel<<<blocks, kNhwcBlockThreads, tile_bytes>>>(x, f, rounding, noise, flags, offsets, codes,
                                                                          meta, walk, per_block);
    return;
  }
  const int64_t blocks = (f.g.buckets + kWarpsPerBlock - 1) / kWarpsPerBlock;
  quantize_mixed_kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock>>>(x, f, rounding, noise, flags, offsets,
                                                                             codes, meta);
}

void launch_dequantize_mixed(const uint8_t* codes, const uint8_t* meta, const MixedFormat& f, const BucketFlags& flags,
                             const BucketOffsets& offsets, float* out, const CodecWalk& walk) {
  if (f.g.buckets == 0) return;
  if (walk.nhwc) return launch_decode_nhwc(codes, meta, f, flags, offsets, walk, StoreValues{out});
  launch_for_each_lane(f.g.buckets, lanes_log2(dequantize_lanes(f.g.bucket_size)),
                       DequantizeBucketQuadsBody<>{codes, meta, f, flags, offsets, StoreValues{out}});
}

void launch_dequantize_mixed_apply(const uint8_t* codes, const uint8_t* meta, const MixedFormat& f,
                                   const BucketFlags& flags, const BucketOffsets& offsets, ActivationId fn,
                                   bool from_output, const float* grad, float* gx, const CodecWalk& walk) {
  if (f.g.buckets == 0) return;
  const int lane_shift = lanes_log2(dequantize_lanes(f.g.bucket_size));
  with_apply_derivative(fn, from_output, grad, gx, [&](auto sink) {
    if (walk.nhwc) return launch_decode_nhwc(codes, meta, f, flags, offsets, walk, sink);
    launch_for_each_lane(f.g.buckets, lane_shift,
                         DequantizeBucketQuadsBody<decltype(sink)>{codes, meta, f, flags, offsets, sink});
  });
}

}  // namespace packrat::cuda
