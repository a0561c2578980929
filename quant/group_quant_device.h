#pragma once
// The per-group codec's GPU work, one index at a time: the bodies the CUDA kernels
// (group_quant_cuda.cu) run, CUDA-free so that the CPU tests run them too (run_on_host) and
// check them against the CPU kernels byte for byte. Index i is block i % blocks_per_group() of
// group i / blocks_per_group(); blocks past a short group's end do nothing.
#include <cstdint>

#include "quant/group_quant.h"

namespace packrat {

// Codes of one block, from the group's metadata already written (the fused CUDA kernel holds
// the same parameters in registers: loading a stored record gives them back exactly).
struct QuantizeBlockBody {
  const float* x;   // (g.numel)
  GroupGeometry g;
  Rounding rounding;
  QuantNoise noise;
  const uint8_t* meta;  // (g.meta_bytes())
  uint8_t* codes;       // (g.code_bytes())

  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t group = i / g.blocks_per_group(), block = i % g.blocks_per_group();
    const int64_t len = g.group_len(group), start = g.group_start(group);
    if (8 * block >= len) return;
    const GroupParams p = load_group_meta(meta + group * meta_bytes_per_group(g.meta), g.meta);
    quantize_block8(x + start, len, block, static_cast<uint64_t>(start), p, g.bits, rounding, noise,
                    codes + g.group_code_offset(group));
  }
};

struct DequantizeBlockBody {
  const uint8_t* codes;  // (g.code_bytes())
  const uint8_t* meta;   // (g.meta_bytes())
  GroupGeometry g;
  float* out;  // (g.numel)

  PACKRAT_HD void operator()(int64_t i) const {
    const int64_t group = i / g.blocks_per_group(), block = i % g.blocks_per_group();
    const int64_t len = g.group_len(group);
    if (8 * block >= len) return;
    const GroupParams p = load_group_meta(meta + group * meta_bytes_per_group(g.meta), g.meta);
    dequantize_block8(codes + g.group_code_offset(group), len, block, p, g.bits, out + g.group_start(group));
  }
};

namespace cuda {
// Launchers (group_quant_cuda.cu; CUDA builds only), on device pointers, on the default stream.
// One warp per group: the range by warp reductions, the metadata, then the group's blocks
// across the lanes (QuantizeBlockBody's arithmetic with the parameters in registers). The caller
// checks the launch (check_last_launch).
void launch_quantize_groups(const float* x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                            uint8_t* codes, uint8_t* meta, double* group_range_sq);
// One thread per block: DequantizeBlockBody.
void launch_dequantize_groups(const uint8_t* codes, const uint8_t* meta, const GroupGeometry& g, float* out);
}  // namespace cuda

}  // namespace packrat
