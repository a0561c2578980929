#pragma once
// bf16 convolutions by Winograd F(2x2, 3x3), packrat's own kernel, where oneDNN 2.6 has only direct
// bf16 kernels: on a CPU with AVX512_BF16 and no AMX (AMD EPYC Zen 4 / Zen 5), f32's Winograd
// (oneDNN's jit_wino_4x3) ran ResNet-18's 3x3 stride-1 convolutions about as fast as the bf16
// direct kernels, so bf16 gained the step little (docs/precision.md). Each 2x2 output tile is
//   y = A^T [ (G w G^T) . (B^T d B) ] A
// over a 4x4 input patch d: 16 products a tile and channel pair instead of 36, as 16 GEMMs
// (tiles x Cin) . (Cin x Cout) on vdpbf16ps, the transforms in f32 and their results rounded to
// bf16 (to nearest even) for the products, which sum in f32. The transformed inputs' rounding
// adds about 3e-3 of relative error to an output (the direct kernel's: that of f32 sums), below
// the bf16 rounding of the output itself times three; convolution_algorithm: direct keeps the
// direct kernels.
//
// Tiles go through in blocks that stay in L2: a block's transformed inputs (16, tiles, Cin) bf16,
// the products of 64 output channels at a time (16, tiles, 64) f32, then the output transform.
#include "core/backend.h"
#include "core/tensor.h"

namespace packrat::cpu {

// Whether this build and CPU run the kernel (AVX512_BF16 compiled in and present, no AMX, whose
// direct kernels are 3-5x faster) and it serves g: a bf16 3x3 convolution, stride 1, padding 1, no
// dilation or groups, 64 channels or more in blocks of 16 on both sides, at least 1024 2x2 tiles
// (N x H/2 x W/2), under ConvAlgorithm Auto.
bool winograd_bf16_serves(const ConvGeometry& g);

// y (N, Cout, H, W) bf16 nChw16c from x (N, Cin, H, W) bf16 nChw16c, w (Cout, Cin, 3, 3) f32 plain
// (rounded to bf16 first, as autocast reads it) and b (Cout) f32 or undefined.
Tensor winograd_bf16_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g);

// dx (N, Cin, H, W) f32 nChw16c from gy (N, Cout, H, W) bf16 nChw16c and w: the same kernel on the
// weights turned half a circle with their channels swapped.
Tensor winograd_bf16_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g);

}  // namespace packrat::cpu
