#pragma once
// The few-bit codec's GPU work, one block of 8 elements per index: the bodies its CUDA kernels
// (fewbit_codec_cuda.cu) run, CUDA-free so that the CPU tests run them too (run_on_host) against
// the CPU kernels, byte for byte. A block's codes fill exactly `bits` bytes, so the blocks of a
// tensor are written independently (the last one may be partial).
#include <cstdint>

#include "core/pointwise_math.h"
#include "quant/bitpack.h"
#include "quant/fewbit_codec.h"

namespace packrat {

// For encodes that need no activation (Table or Mask codes without y).
struct NoActivation {
  static constexpr bool kFromOutput = false;
  PACKRAT_HD static float f(float x) { return x; }
  PACKRAT_HD static float df(float) { return 0.0f; }
};

// Codes of elements [8 * blk, 8 * blk + 8) of src, packed at B bits; y = A::f(src) there when y is
// given. Table: the interval of src in the lookup table; Step: A's f' (from the output when
// c.from_output) equals c.step_hi; Mask: src (u8) is non-zero.
template <class A, int B>
struct FewbitEncodeBody {
  FewbitCoder c;
  const void* src;  // (n) f32 (Table, Step) or u8 (Mask)
  float* y;         // (n) or null
  int64_t n;
  uint8_t* packed;  // (packed_bytes(n, B))

  PACKRAT_HD uint32_t code(int64_t i) const {
    if (c.kind == FewbitKind::Mask) return static_cast<const uint8_t*>(src)[i] != 0 ? 1u : 0u;
    const float v = static_cast<const float*>(src)[i];
    if (c.kind == FewbitKind::Table) return fewbit_index<(1 << B) - 1>(c.lut, v);
    float d;
    if constexpr (A::kFromOutput) {
      d = c.from_output ? A::df_from_output(v) : A::df(v);
    } else {
      d = A::df(v);
    }
    return d == c.step_hi ? 1u : 0u;
  }

  PACKRAT_HD void operator()(int64_t blk) const {
    const int64_t i0 = 8 * blk;
    const int count = n - i0 < 8 ? static_cast<int>(n - i0) : 8;
    uint64_t w = 0;
    for (int k = 0; k < count; ++k) {
      w |= block_put(code(i0 + k), k, B);
      if (y) y[i0 + k] = A::f(static_cast<const float*>(src)[i0 + k]);
    }
    store_block8(w, static_cast<int>(packed_bytes(count, B)), packed + blk * B);
  }
};

// out = fewbit_apply(code, grad) for the elements of block blk, or with grad null out = level[code].
template <int B>
struct FewbitDecodeBody {
  FewbitKind kind;
  float levels[1 << B];  // (2^B)
  const uint8_t* packed;
  const float* grad;  // (n) or null
  float* out;         // (n)
  int64_t n;

  PACKRAT_HD void operator()(int64_t blk) const {
    const int64_t i0 = 8 * blk;
    const int count = n - i0 < 8 ? static_cast<int>(n - i0) : 8;
    const uint64_t w = load_block8(packed + blk * B, B, static_cast<int>(packed_bytes(count, B)));
    for (int k = 0; k < count; ++k) {
      const uint32_t code = block_code(w, k, B);
      out[i0 + k] = grad ? fewbit_apply(kind, levels, code, grad[i0 + k]) : levels[code];
    }
  }
};

namespace cuda {
// Launchers (fewbit_codec_cuda.cu; CUDA builds only), on device pointers, one thread per block,
// on the default stream; the caller checks the launch. fn: the activation (null for Table or Mask
// codes without y).
void launch_fewbit_encode(const FewbitCoder& c, const ActivationId* fn, const void* src, float* y, int64_t n,
                          uint8_t* packed);
void launch_fewbit_decode(const FewbitCoder& c, const uint8_t* packed, const float* grad, float* out, int64_t n);
}  // namespace cuda

}  // namespace packrat
