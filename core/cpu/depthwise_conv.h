#pragma once
// Depthwise convolution's weight gradient, packrat's own loop, where oneDNN 2.6 has no fast
// kernel for it:
// - 5x5 kernels and inputs smaller than the kernel (EfficientNet's late stages: 1152 channels at
//   2x2, 672 at 4x4) on nChw16c, where oneDNN falls back to its gemm kernel, one tiny im2col +
//   gemm per channel: about 100 ms of EfficientNet-B0's 370 ms FP32 step at batch 32 on one
//   thread (bench: TrainStep/efficientnet_b0_cifar, 369 -> 289 ms CPU). Without AVX-512 the
//   convolutions' tensors are nChw8c (or plain) and conv_backward_weights copies them to nChw16c
//   for this loop (the gemm fallback was a third of that step on an AVX2 EPYC);
// - every depthwise convolution on channels-last (NHWC) activations but those of oneDNN's jit_dw
//   kernel: there oneDNN 2.6 runs its generic jit_bf16 kernel, 97 ms of EfficientNet-B0's bf16
//   step on an AMX Xeon (docs/precision.md).
// It reads f32 or bf16 operands as they lie (a bf16 value widened as it is read).
#include "core/backend.h"

namespace packrat::cpu {

// Whether depthwise_backward_weights serves g: groups == Cin == Cout, channels in blocks of 16.
bool depthwise_loop_serves(const ConvGeometry& g);

// x (N, C, H, W) and gy (N, C, OH, OW), each nChw16c or NHWC, f32 or bf16 -> gw (C, 1, KH, KW)
// plain, and gb (C) when g.has_bias, both f32. Sums in f32, as oneDNN's kernels do.
void depthwise_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw, Tensor& gb);

}  // namespace packrat::cpu
