#pragma once
// The launchers of the CUDA codec kernels (quant/cuda/*.cu; CUDA builds only), called by the CUDA
// codec table (quant/cuda/cuda_codecs.cpp). What each thread or lane does is written CUDA-free in
// the schemes' folders (quant/group/group_quant_warp.h, quant/mixed/mixed_kernel_bodies.h,
// quant/fewbit/fewbit_device.h, quant/bits/bitpack_device.h), where the CPU tests replay it index
// by index against the CPU kernels, byte for byte.
#include <cstddef>
#include <cstdint>

#include "core/activation_id.h"
#include "quant/bits/bitpack_device.h"
#include "quant/fewbit/fewbit_device.h"
#include "quant/fp8/fp8_math.h"
#include "quant/group/group_quant.h"
#include "quant/group/nhwc_tile.h"
#include "quant/mixed/mixed_kernel_bodies.h"

namespace packrat::cuda {

// All on device pointers, on the default stream; the caller checks the launch (check_last_launch).

// ---- per-group quantization (group_quant_cuda.cu)
// An NHWC walk (walk.nhwc, nhwc_stageable): x / out / grad / gx are NHWC tensors taken in plain order,
// the quantize's blocks staging their groups' run through shared memory (quant/group/nhwc_tile.h), the
// decode's writing NHWC straight from their groups' codes (quant/group/nhwc_decode.h); otherwise the
// buffers as they lie.
// quantize_lanes(G) lanes a group: the range by shuffles, the metadata, then the group's blocks
// of 8 across the lanes, rounded with noise the warp draws once per 128-element Philox block and
// shares through shared memory.
void launch_quantize_groups(const float* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                            uint8_t* codes, uint8_t* meta, double* group_range_sq, const CodecWalk& walk);
// dequantize_lanes(G) lanes a group, each on quads of 4 values: DequantizeQuadsBody (a walk: a
// thread a pixel's quad of channels).
void launch_dequantize_groups(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, float* out,
                              const CodecWalk& walk);
// The same lanes, each quad's values x (y = f(x) where from_output) turned into gx = grad * f'(x)
// (ApplyDerivative) instead of stored. fn < kNumActivations, checked by the caller.
void launch_dequantize_groups_apply(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g,
                                    ActivationId fn, bool from_output, const float* grad, float* gx,
                                    const CodecWalk& walk);

// ---- mixed bucket quantization (mixed_quant_cuda.cu)
// Bytes of CUB's temporary storage for the scans and the count below, for `buckets` buckets.
size_t mixed_scan_scratch_bytes(int64_t buckets);
// Per-bucket decisions: flags (buckets,) u8 and offsets (buckets + 1,) i64, the exclusive prefix
// sum of the bucket code bytes (CUB DeviceScan); totals (2,) i64 = {code bytes, mix buckets}.
void launch_decide_buckets(const MixedQuantConfig& c, const BucketGeometry& g, const QuantNoise& noise, uint8_t* flags,
                           int64_t* offsets, int64_t* totals, void* scratch, size_t scratch_bytes);
// packed (packed_bytes(buckets, 1),) from flags (buckets,): PackFlagsBody.
void launch_pack_flags(const uint8_t* flags, int64_t buckets, uint8_t* packed);
// offsets (buckets + 1,) from the widths held (BucketBytesBody, then the scan).
void launch_code_offsets(const MixedFormat& f, const BucketFlags& flags, int64_t* offsets, void* scratch,
                         size_t scratch_bytes);
// One warp per bucket: its range or scale by warp reductions (the reference's values), its
// metadata, then its blocks of 8 codes across the lanes (QuantizeBucketBlockBody's arithmetic
// with the grid in registers), at offsets(g). walk: plain (channels 0), or an NHWC tensor taken in
// plain order, its buckets staged through shared memory (quant/mixed/nhwc_buckets.h; the caller checks
// nhwc_buckets_stageable).
void launch_quantize_mixed(const float* x, const MixedFormat& f, Rounding rounding, const QuantNoise& noise,
                           const BucketFlags& flags, const BucketOffsets& offsets, uint8_t* codes, uint8_t* meta,
                           const CodecWalk& walk);
// Plain: dequantize_lanes(bucket size) lanes a bucket, DequantizeBucketQuadsBody. NHWC: a block's
// buckets decoded straight into NHWC (quant/mixed/nhwc_buckets.h).
void launch_dequantize_mixed(const uint8_t* codes, const uint8_t* meta, const MixedFormat& f, const BucketFlags& flags,
                             const BucketOffsets& offsets, float* out, const CodecWalk& walk);
// The same, each quad's values x (y = f(x) where from_output) turned into gx = grad * f'(x)
// (quant/codec/apply_derivative_sink.h) instead of stored; grad and gx in the walk's layout. fn <
// kNumActivations, checked by the caller.
void launch_dequantize_mixed_apply(const uint8_t* codes, const uint8_t* meta, const MixedFormat& f,
                                   const BucketFlags& flags, const BucketOffsets& offsets, ActivationId fn,
                                   bool from_output, const float* grad, float* gx, const CodecWalk& walk);

// ---- few-bit codes (fewbit_codec_cuda.cu)
// One thread per quad. fn: the activation (null for Table or Mask
// codes without y).
void launch_fewbit_encode(const FewbitCoder& c, const ActivationId* fn, const void* src, float* y, int64_t n,
                          uint8_t* packed);
void launch_fewbit_decode(const FewbitCoder& c, const uint8_t* packed, const float* grad, float* out, int64_t n);

// ---- 8-bit floating point (fp8_codec_cuda.cu; n = g.numel > 0)
// per_group: fp8_group_lanes(G) lanes a group (Fp8GroupEncodeBody): each lane's amax, their max by
// shuffles, then each lane's codes and lane 0's scale. per_tensor: the amax by threads, warps'
// shuffles and an atomicMax on its bits into amax (1,) f32 scratch, then Fp8TensorEncodeBody a quad
// a thread. codes (n,), scales (groups,).
void launch_fp8_encode(const float* x, Fp8Format f, Fp8Scale s, const Fp8Geometry& g, uint8_t* codes, float* scales,
                       float* amax);
// Fp8DecodeBody, a thread a quad.
void launch_fp8_decode(const uint8_t* codes, const float* scales, Fp8Format f, const Fp8Geometry& g, float* out);

// ---- exact packing (bitpack_cuda.cu)
// One thread per block of 8 codes. `elem`: bytes per integer (1: u8,
// 4: i32, 8: i64). launch_pack_codes first sets *first_unfit to all ones (-1 as an i64), then
// atomically lowers it to the index of the first element that does not fit.
void launch_pack_codes(const void* src, int elem, int64_t n, int bits, uint8_t* dst, int64_t* first_unfit);
void launch_unpack_codes(const uint8_t* src, int64_t n, int bits, void* out, int elem);

}  // namespace packrat::cuda
