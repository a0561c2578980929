#pragma once
// The few-bit codec (Few-Bit Backward, arXiv:2202.00441, Alg. 1): one b-bit code per element of a saved
// activation, packed in quant/bits/bitpack.h's layout, and its backward, grad * level[code].
//   Table: code = the interval of x (or of y = f(x)) among the table's borders (fewbit_index)
//   Step:  code = [f'(x) == step_hi], the exact 1-bit mask of a step derivative (relu family)
//   Mask:  code = [m != 0], a boolean mask (dropout, Need::Mask)
// The per-element logic is PACKRAT_HD (fewbit_index in quant/fewbit/fewbit_table.h, fewbit_apply
// below), so a CUDA kernel writes and reads the same codes; the CPU kernels are in
// quant/cpu/fewbit_codec_cpu.cpp. The entry points dispatch by device.
#include <cstdint>

#include "core/half.h"  // bf16_t
#include "core/hd.h"
#include "quant/fewbit/fewbit_table.h"

namespace packrat {

class Tensor;
struct Pointwise;

enum class FewbitKind : uint8_t { Table, Step, Mask };

// How an element's code is made and what it means in backward.
struct FewbitCoder {
  FewbitKind kind = FewbitKind::Table;
  int bits = 1;
  FewbitLut lut;              // Table: interval lookup (on x, or on y when from_output); levels of every kind
  float step_hi = 1.0f;       // Step: code 1 where f'(x) == step_hi; levels in lut.levels[0..1]
  bool from_output = false;   // the tensor indexed is y = f(x)
};

// What backward makes of one element's code and incoming gradient g: g * level[code], or for a
// mask code ? g : 0 (exact, also for a non-finite g).
PACKRAT_HD inline float fewbit_apply(FewbitKind kind, const float* levels, uint32_t code, float g) {
  return kind == FewbitKind::Mask ? (code ? g : 0.0f) : g * levels[code];
}

// ---- entry points: dispatched by the device of their tensors ---------------------------------

// One pass over src (f32 for Table and Step, u8 for Mask; any shape): its packed codes into
// packed ((packed_bytes(numel, c.bits),) u8), and y = fn->forward(src) into y when y is defined
// (same numel, f32). A 16-bit src (autocast) gives the codes of its f32 values and y in its dtype:
// the CPU reads and writes bf16 in the pass; elsewhere through f32 copies. fn: the activation
// (Step needs its f'; forward needs f). CPU: the kernel in quant/cpu/fewbit_codec_cpu.cpp; a GPU:
// quant/cuda/fewbit_codec_cuda.cu (quant/codec/codec_kernels.h).
void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const Tensor& src, const Tensor& y, const Tensor& packed);
// One pass: out = fewbit_apply(code, grad) elementwise, or with grad undefined out = level[code]
// (the load of a Table or Step code). out and grad: n f32 each, in the order of the saved buffer.
void fewbit_decode(const FewbitCoder& c, const Tensor& packed, const Tensor& grad, const Tensor& out);

// ---- the CPU kernels (quant/cpu/fewbit_codec_cpu.cpp), on host pointers --------------------------------

// src: n elements of elem bytes; y: n floats or null.
void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const void* src, size_t elem, float* y, int64_t n,
                   uint8_t* packed);
// The same from n bf16 values (Table, Step): the codes of their f32 values, y (null, or n bf16) f(x)
// rounded as Tensor::to rounds it; no f32 copy of src or y.
void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const bf16_t* src, bf16_t* y, int64_t n,
                   uint8_t* packed);
// g: n floats, or null for the load form.
void fewbit_decode(const FewbitCoder& c, const uint8_t* packed, const float* g, float* out, int64_t n);

}  // namespace packrat
