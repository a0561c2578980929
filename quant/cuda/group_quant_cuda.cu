// The per-group codec's CUDA kernels over the PACKRAT_HD helpers of group_quant.h and the
// per-lane steps of group_quant_warp.h, so that a GPU writes the CPU's bytes (same noise words,
// same rounding, same packing). group_quant_warp.h says which lane does what, and why.
#include <cuda_runtime.h>

#include <cstdlib>
#include <string_view>

#include "core/cuda/launch.cuh"
#include "quant/codec/apply_derivative_sink.h"
#include "quant/cuda/launchers.h"
#include "quant/group/group_quant_warp.h"
#include "quant/group/nhwc_decode.h"
#include "quant/cuda/quad_quantize.h"
#include "quant/group/nhwc_tile.h"

namespace packrat::cuda {

namespace {

// 32 / lanes groups a warp, `lanes` lanes a group, kLaneBlocks blocks of 8 values a lane a chunk:
// a lane's first chunk stays in registers from the range scan to its codes (all of a group's
// blocks do where a warp takes several groups). kBits: the width where it is one of the common
// ones (the packing's shifts become constants), else 0 (g.bits). Three blocks an SM: the lane's
// 32 values in 80 registers (ptxas spills 36 bytes at 2 bits), 24 warps an SM. On an H100 this
// quantized 2-bit groups at 0.53 of copy bandwidth against 0.45 with two blocks of 110 registers
// and no spills (packrat_bench CodecCuda/GroupQuantize/bits:2, side by side in one run): the
// kernel waits on memory more than on its spilled values.
// kStaged: x is an NHWC tensor (walk) quantized in plain order: blocks of 8 warps first stage their
// groups' run into shared memory (quant/group/nhwc_tile.h), and the lanes read it there.
template <int kBits, bool kStaged = false>
__global__ void __launch_bounds__(kStaged ? kNhwcBlockThreads : kThreadsPerBlock, 3)
    quantize_groups_kernel(const float* x, GroupGeometry g, int lanes, Rounding rounding, QuantNoise noise,
                           uint8_t* codes, uint8_t* meta, double* range_sq, CodecWalk walk) {
  constexpr int kWarps = (kStaged ? kNhwcBlockThreads : kThreadsPerBlock) / kWarpLanes;
  __shared__ uint32_t noise_shared[kWarps][kChunkNoiseWords];  // (warps, shared_noise_index's places)
  const int bits = kBits > 0 ? kBits : g.bits;
  const int lane = static_cast<int>(threadIdx.x % kWarpLanes), warp_here = static_cast<int>(threadIdx.x / kWarpLanes);
  const int64_t warp = blockIdx.x * static_cast<int64_t>(kWarps) + warp_here;
  const float* values = x;  // where element e of the geometry is: values[e - shift]
  int64_t shift = 0;
  if constexpr (kStaged) {
    // The block's run, plain order (kNhwcTileFloats): dynamic shared memory, as with 8 warps'
    // noise words it passes the 48 KiB a block may declare statically.
    extern __shared__ float4 staged_run[];
    float* tile = reinterpret_cast<float*>(staged_run);
    const NhwcBlock b = nhwc_block(g, nhwc_quantize_block_groups(lanes), blockIdx.x);
    nhwc_stage(walk, b.run, x, tile, static_cast<int>(threadIdx.x), kNhwcBlockThreads);
    __syncthreads();
    values = tile;
    shift = b.run.begin;
  }
  if (warp >= quantize_warps(g, lanes)) return;  // the whole warp
  const QuantLane q = quant_lane(g, lanes, warp, lane);
  const float* xg = values + (q.at.start - shift);  // (len) of the lane's group
  const int64_t rounds = quantize_rounds(g, lanes), chunks = quantize_chunks(g, lanes);
  const int group_lead = lane & ~(lanes - 1);
  const unsigned group_lanes = lanes == kWarpLanes ? kFullWarp : ((1u << lanes) - 1u) << group_lead;

  // The range: every lane scans its blocks, then the group's lanes merge (xor offsets < lanes
  // stay within the group's lanes).
  float v[kLaneBlocks][8];  // the lane's blocks of the current chunk (past n[j]: not read)
  int n[kLaneBlocks];       // their lengths (0: none)
  v[0][0] = 0.0f;           // an idle group's lead loads nothing, and its first value is shuffled below
#pragma unroll
  for (int j = 0; j < kLaneBlocks; ++j) {
    n[j] = lane_block_len(q, lanes, j);
    load_floats8(xg + 8 * lane_block(q, lanes, j), n[j], v[j]);
  }
  RangeScan range(__shfl_sync(kFullWarp, v[0][0], group_lead));  // the group's first value: its first lane's
#pragma unroll
  for (int j = 0; j < kLaneBlocks; ++j) range.keep(v[j], n[j]);
  for (int64_t r = kLaneBlocks; r < rounds; ++r) {  // groups over 1024 values only
    float w[8];
    const int m = lane_block_len(q, lanes, r);
    load_floats8(xg + 8 * lane_block(q, lanes, r), m, w);
    range.keep(w, m);
  }
  for (int offset = lanes / 2; offset > 0; offset /= 2) {
    RangeScan o = range;
    o.mn = __shfl_xor_sync(kFullWarp, range.mn, offset);
    o.mx = __shfl_xor_sync(kFullWarp, range.mx, offset);
    range.merge(o);
  }
  if (range.ends_in_zero()) {  // the same on all of the group's lanes: its first zero's sign
    uint64_t zero = kNoZero;
    for (int64_t r = 0; r < rounds; ++r) {
      float w[8];
      const int m = lane_block_len(q, lanes, r);
      load_floats8(xg + 8 * lane_block(q, lanes, r), m, w);
      const uint64_t z = first_zero_in(w, m, 8 * lane_block(q, lanes, r));
      zero = z < zero ? z : zero;
    }
    for (int offset = lanes / 2; offset > 0; offset /= 2) {
      const uint64_t z = __shfl_xor_sync(group_lanes, zero, offset);
      zero = z < zero ? z : zero;
    }
    range.settle_zero(zero);
  }
  range.finish();
  const GroupParams p = group_params(range.mn, range.mx, bits, g.meta);
  if (q.active && q.sub == 0) {
    store_group_meta(p, g.meta, meta + q.group * meta_bytes_per_group(g.meta));
    if (range_sq) range_sq[q.group] = group_range_sq(p, q.at.len, bits);
  }

  // The codes, a chunk at a time; stochastic rounding reads the chunk's noise from shared memory.
  const int64_t warp_begin = __shfl_sync(kFullWarp, q.at.start, 0);
  const int64_t warp_end = __shfl_sync(kFullWarp, q.at.start + q.at.len, q.last_lead);
  const bool stochastic = rounding == Rounding::Stochastic;
  uint32_t* words = noise_shared[warp_here];
  for (int64_t c = 0; c < chunks; ++c) {  // the same trip count on every lane
    if (c > 0) {                          // a second read (L1 or L2) only for groups over 1024 values
#pragma unroll
      for (int j = 0; j < kLaneBlocks; ++j) {
        n[j] = lane_block_len(q, lanes, c * kLaneBlocks + j);
        load_floats8(xg + 8 * lane_block(q, lanes, c * kLaneBlocks + j), n[j], v[j]);
      }
    }
    const NoiseChunk nc = noise_chunk(chunk_elements(warp_begin, warp_end, lanes, c));
    if (stochastic) {
      __syncwarp();  // the last chunk's reads are done
      make_chunk_noise(noise, nc, lane, words);
      __syncwarp();
    }
#pragma unroll
    for (int j = 0; j < kLaneBlocks; ++j) {
      const int64_t block = lane_block(q, lanes, c * kLaneBlocks + j);
      if (n[j] > 0)
        quantize_lane_block(v[j], n[j], static_cast<uint64_t>(q.at.start + 8 * block), p, bits, nc,
                            stochastic ? words : nullptr, codes + q.at.code_offset + block * bits);
    }
  }
}

// An NHWC tensor's groups without a staging tile, or a plain tensor's without a warp a group
// (quant/cuda/quad_quantize.h says how): a thread a box of 4 channels x 8 pixels (plain: 4 blocks of
// 8), in registers from its 8 loads to its codes; the block's range and noise in shared memory
// (34 KiB), two barriers; ptxas: 78 registers (80 at 3 bits), no spills, so three blocks an SM.
// The default wherever its plan takes the shape (every NHWC activation of ResNet-18 but the
// 3-channel input; plain tensors whose runs divide them), the staged or warp-a-group kernel
// elsewhere. On an H200 (session 45, CodecCuda side by side, A B A B in one run) it quantizes an
// NHWC tensor at 0.39-0.40 of copy against the staged kernel's 0.23-0.25, a plain one at 0.39-0.47
// against 0.36-0.47, and the 2-bit ResNet-18 step at 512 ran at 0.867x of FP32 against 0.80x.
// PACKRAT_QUANTIZE=staged picks the older kernels everywhere (scripts/device_check.sh's EXPERIMENT).
template <int kBits>
__global__ void __launch_bounds__(kQuadBoxThreads, 3)
    quantize_groups_quads_kernel(const float* x, GroupGeometry g, QuadPlan plan, Rounding rounding,
                                 QuantNoise noise, uint8_t* codes, uint8_t* meta, double* range_sq) {
  __shared__ QuadShared s;
  const int bits = kBits > 0 ? kBits : g.bits;
  const int t = static_cast<int>(threadIdx.x);
  const ElementRun run = quad_run(plan, blockIdx.x);
  const NoiseChunk nc = noise_chunk(run);
  const bool stochastic = rounding == Rounding::Stochastic;

  // Phase A: the box's loads in flight while the block makes its noise.
  const QuadBox box = quad_box(plan, blockIdx.x, t);
  float v[4][8];  // (channel, pixel) of the box
  if (box.active) load_quad_box(x, plan, box, v);
  if (stochastic) make_chunk_noise(noise, nc, t, s.noise, kQuadBoxThreads);
  if (box.active) keep_box_ranges(v, plan, box, s);
  __syncthreads();

  // Phase B: a team of plan.lanes threads a group (quad_team_lane), its range merged by shuffles.
  const QuadRunGroups groups = quad_run_groups(g, run);
  const int64_t rounds = quad_team_rounds(plan, groups);
  for (int64_t round = 0; round < rounds; ++round) {  // the same on every thread
    const QuadTeamLane l = quad_team_lane(plan, groups, round, t);
    const QuadGroup grp = l.active ? quad_group(g, run, groups.first + l.i) : QuadGroup{};
    GroupRangePart part = l.active ? group_range_part(s, grp, l.sub, plan.lanes) : GroupRangePart{};
    for (int offset = plan.lanes / 2; offset > 0; offset /= 2) {  // within the team's lanes
      const GroupRangePart other{__shfl_xor_sync(kFullWarp, part.mn, offset),
                                 __shfl_xor_sync(kFullWarp, part.mx, offset),
                                 __shfl_xor_sync(kFullWarp, part.first_zero, offset)};
      part = merge_parts(part, other);
    }
    if (!l.active) continue;
    const GroupParams p = settle_quad_group(s, grp, part, bits, g.meta);
    if (l.sub == 0) {
      store_group_meta(p, g.meta, meta + grp.group * meta_bytes_per_group(g.meta));
      if (range_sq) range_sq[grp.group] = group_range_sq(p, 8 * int64_t{grp.blocks}, bits);
    }
    keep_group_params(s, grp, l.sub, plan.lanes, p);
  }
  __syncthreads();

  // Phase C: the box's codes.
  if (box.active) quantize_quad_box(v, plan, box, bits, nc, s, stochastic ? s.noise : nullptr, codes);
}

// PACKRAT_QUANTIZE=staged: the staged and warp-a-group kernels only, for A/B runs.
bool staged_quantize_chosen() {
  static const bool chosen = [] {
    const char* v = std::getenv("PACKRAT_QUANTIZE");
    return v != nullptr && std::string_view(v) == "staged";
  }();
  return chosen;
}

void launch_quantize_quads(const float* x, const GroupGeometry& g, const QuadPlan& plan, Rounding rounding,
                           const QuantNoise& noise, uint8_t* codes, uint8_t* meta, double* range_sq) {
  const auto blocks = static_cast<unsigned>(plan.runs);
  auto launch = [&](auto kernel) {
    kernel<<<blocks, kQuadBoxThreads>>>(x, g, plan, rounding, noise, codes, meta, range_sq);
  };
  switch (g.bits) {
    case 1:
      return launch(quantize_groups_quads_kernel<1>);
    case 2:
      return launch(quantize_groups_quads_kernel<2>);
    case 4:
      return launch(quantize_groups_quads_kernel<4>);
    case 8:
      return launch(quantize_groups_quads_kernel<8>);
    default:
      return launch(quantize_groups_quads_kernel<0>);
  }
}

template <bool kStaged>
void launch_quantize(const float* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                     uint8_t* codes, uint8_t* meta, double* group_range_sq, const CodecWalk& walk) {
  const int lanes = quantize_lanes(g.group_size);
  const int threads = kStaged ? kNhwcBlockThreads : kThreadsPerBlock, warps = threads / kWarpLanes;
  const auto blocks = static_cast<unsigned>((quantize_warps(g, lanes) + warps - 1) / warps);
  constexpr int tile_bytes = kStaged ? kNhwcTileFloats * static_cast<int>(sizeof(float)) : 0;
  auto launch = [&](auto kernel) {
    if (kStaged) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, tile_bytes);
    kernel<<<blocks, threads, tile_bytes>>>(x, g, lanes, rounding, noise, codes, meta, group_range_sq, walk);
  };
  switch (g.bits) {
    case 1:
      return launch(quantize_groups_kernel<1, kStaged>);
    case 2:
      return launch(quantize_groups_kernel<2, kStaged>);
    case 4:
      return launch(quantize_groups_kernel<4, kStaged>);
    case 8:
      return launch(quantize_groups_kernel<8, kStaged>);
    default:
      return launch(quantize_groups_kernel<0, kStaged>);
  }
}

// One block's groups of an NHWC tensor decoded straight into NHWC (quant/group/nhwc_decode.h): its codes
// and metadata copied into shared memory, then each thread's tiles of 4 pixels x 4 channels
// (kQuads: nhwc_decode_run_quads, where nhwc_quad_decodable), else its quads of channels one value
// at a time, decoded and handed to the sink (the values, or an activation's backward against the
// NHWC gradient). On an H100 (CodecCuda/GroupNhwc..., side by side in one run, 2 bits) the tiles
// decode at 0.86-0.89 of copy bandwidth against 0.44-0.46 value by value, and a GELU's backward
// from the codes at 0.63-0.64 against 0.46. Two blocks an SM, as measured (session 29): ptxas then
// keeps the value-by-value decode without spills (left to itself, it took 80 registers and
// spilled 40 bytes a thread once the records were whole loads); the tiles' kernel takes 64.
template <class Sink, bool kQuads>
__global__ void __launch_bounds__(kNhwcBlockThreads, 2)
    decode_groups_nhwc_kernel(NhwcElementDecoder decode, CodecWalk walk, int64_t per_block, Sink sink) {
  __shared__ __align__(16) uint8_t block_codes[kNhwcCodeBytes];  // from bytes.code_begin
  __shared__ __align__(16) uint8_t block_meta[kNhwcMetaBytes];   // from bytes.meta_begin
  const int t = static_cast<int>(threadIdx.x);
  const NhwcBlock b = nhwc_block(decode.g, per_block, blockIdx.x);
  const NhwcElementDecoder here =
      nhwc_copy_block_bytes(decode, nhwc_block_bytes(decode.g, b), block_codes, block_meta, t, kNhwcBlockThreads);
  __syncthreads();
  if constexpr (kQuads)
    nhwc_decode_run_quads(walk, b.run, here, sink, t, kNhwcBlockThreads);
  else
    nhwc_decode_run(walk, b.run, here, sink, t, kNhwcBlockThreads);
}

template <class Sink>
void launch_decode_nhwc(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, const CodecWalk& walk,
                        const Sink& sink) {
  const int64_t per_block = nhwc_decode_block_groups(g);
  const auto blocks = static_cast<unsigned>((g.groups() + per_block - 1) / per_block);
  const NhwcElementDecoder decode = nhwc_element_decoder(codes, meta, g);
  if (nhwc_quad_decodable(g, walk))
    return decode_groups_nhwc_kernel<Sink, true><<<blocks, kNhwcBlockThreads>>>(decode, walk, per_block, sink);
  decode_groups_nhwc_kernel<Sink, false><<<blocks, kNhwcBlockThreads>>>(decode, walk, per_block, sink);
}

}  // namespace

void launch_quantize_groups(const float* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                            uint8_t* codes, uint8_t* meta, double* group_range_sq, const CodecWalk& walk) {
  if (g.groups() == 0) return;
  if (!staged_quantize_chosen()) {
    const QuadPlan plan = walk.nhwc ? nhwc_quad_plan(g, walk) : walk.channels == 0 ? plain_quad_plan(g) : QuadPlan{};
    if (plan.quads_per_run > 0)
      return launch_quantize_quads(x, g, plan, rounding, noise, codes, meta, group_range_sq);
  }
  if (walk.nhwc) return launch_quantize<true>(x, g, rounding, noise, codes, meta, group_range_sq, walk);
  launch_quantize<false>(x, g, rounding, noise, codes, meta, group_range_sq, walk);
}

void launch_dequantize_groups(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, float* out,
                              const CodecWalk& walk) {
  if (g.groups() == 0) return;
  if (walk.nhwc) return launch_decode_nhwc(codes, meta, g, walk, StoreValues{out});
  launch_for_each_lane(g.groups(), lanes_log2(dequantize_lanes(g.group_size)),
                       DequantizeQuadsBody<StoreValues>{codes, meta, g, StoreValues{out}});
}

void launch_dequantize_groups_apply(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g,
                                    ActivationId fn, bool from_output, const float* grad, float* gx,
                                    const CodecWalk& walk) {
  if (g.groups() == 0) return;
  const int lane_shift = lanes_log2(dequantize_lanes(g.group_size));
  with_apply_derivative(fn, from_output, grad, gx, [&](auto sink) {
    if (walk.nhwc) return launch_decode_nhwc(codes, meta, g, walk, sink);
    launch_for_each_lane(g.groups(), lane_shift, DequantizeQuadsBody<decltype(sink)>{codes, meta, g, sink});
  });
}

}  // namespace packrat::cuda
