#pragma once
// The per-group codec's CUDA launchers (group_quant_cuda.cu; CUDA builds only). What each lane
// of their warps does is written CUDA-free in group_quant_warp.h, where the CPU tests replay it
// lane by lane (tests/quant/group_quant_warp_test.cpp) against the CPU kernels, byte for byte.
#include <cstdint>

#include "core/activation_id.h"
#include "quant/group/group_quant.h"
#include "quant/group/nhwc_tile.h"

namespace packrat::cuda {

// On device pointers, on the default stream; the caller checks the launch (check_last_launch).
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

}  // namespace packrat::cuda
