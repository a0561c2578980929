// CpuBackend: pointwise activations by id. The vectorised loops are core/cpu/pointwise_loops.h's
// (also the Pointwise table's, which the quantizing stores' CPU kernels use); here they run in
// parallel chunks, on f32 or 16-bit tensors (autocast: widened and narrowed a chunk at a time).
#include <algorithm>
#include <type_traits>

#include "core/cpu/bf16_simd.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/loops.h"
#include "core/cpu/pointwise_loops.h"
#include "core/typed_dispatch.h"

namespace packrat::cpu {

namespace {

using Loop = PointwiseLoop;

Loop derivative_loop(const PointwiseLoops& fn, bool from_output) {
  if (!from_output) return fn.derivative;
  PACKRAT_CHECK(fn.derivative_from_output, "{}: f' cannot be computed from the output", fn.name);
  return fn.derivative_from_output;
}

constexpr int64_t kChunk = 1024;  // elements a chunk: its f32 buffers stay in L1

// dst = loop(src) over n elements, in parallel chunks. A 16-bit side is widened into (or narrowed
// from) an f32 buffer a chunk at a time: one pass over the tensor, no f32 copy of it.
template <typename In, typename Out>
void run_chunked(Loop loop, const In* src, Out* dst, int64_t n) {
  parallel_chunks(n, kPointwiseGrain, [&](int64_t s, int64_t e) {
    alignas(64) float in[kChunk], out[kChunk];
    for (int64_t i = s; i < e; i += kChunk) {
      const int64_t m = std::min(kChunk, e - i);
      const float* x = simd::f32_values(src + i, m, in);
      if constexpr (std::is_same_v<Out, float>) {
        loop(x, dst + i, m);
      } else {
        loop(x, out, m);
        simd::from_f32_run(out, m, dst + i);
      }
    }
  });
}

// y = loop(x): f32 x, or 16-bit x (autocast); y in out_dtype (x's dtype, or f32 for f').
Tensor run_loop(Loop loop, const Tensor& x, DType out_dtype, const char* what) {
  PACKRAT_CHECK(is_f32_or_half(x.dtype()), "{}: expects f32, bf16 or f16, got {}", what, x.describe());
  Tensor y = empty_cpu(x.shape(), out_dtype, x.layout());
  with_typed(x.raw(), x.dtype(), [&](auto* src) {
    using In = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
    if constexpr (std::is_same_v<In, float> || is_half_type<In>) {
      if (out_dtype == DType::f32) run_chunked(loop, src, y.data<float>(), x.numel());
      else if (out_dtype == DType::bf16) run_chunked(loop, src, y.data<bf16_t>(), x.numel());
      else run_chunked(loop, src, y.data<f16_t>(), x.numel());
    }
  });
  return y;
}

}  // namespace

Tensor CpuBackend::pointwise_forward(ActivationId id, const Tensor& x) {
  const PointwiseLoops& fn = pointwise_loops(id);
  return run_loop(fn.forward, x, x.dtype(), fn.name.data());
}

Tensor CpuBackend::pointwise_derivative(ActivationId id, const Tensor& saved, bool from_output) {
  const PointwiseLoops& fn = pointwise_loops(id);
  return run_loop(derivative_loop(fn, from_output), saved, DType::f32, fn.name.data());
}

Tensor CpuBackend::pointwise_backward(ActivationId id, const Tensor& saved, const Tensor& grad, bool from_output) {
  const PointwiseLoops& fn = pointwise_loops(id);
  PACKRAT_CHECK(is_f32_or_half(saved.dtype()), "{} backward: the saved tensor is {}", fn.name, saved.describe());
  grad.check_dtype(DType::f32, fn.name.data());
  PACKRAT_CHECK(saved.numel() == grad.numel() && saved.layout() == grad.layout(),
                "{} backward: gradient {} does not match the saved tensor {}", fn.name, grad.describe(),
                saved.describe());
  Tensor out = Tensor::empty_like(grad);
  const float* gy = grad.data<float>();
  float* gx = out.data<float>();
  const Loop kernel = derivative_loop(fn, from_output);
  with_typed(saved.raw(), saved.dtype(), [&](auto* x) {
    using In = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
    if constexpr (std::is_same_v<In, float> || is_half_type<In>) {
      parallel_chunks(out.numel(), kPointwiseGrain, [&](int64_t s, int64_t end) {
        alignas(64) float d[kChunk], wide[kChunk];  // f' of one chunk, and a 16-bit chunk widened, in L1
        for (int64_t i = s; i < end; i += kChunk) {
          const int64_t n = std::min(kChunk, end - i);
          kernel(simd::f32_values(x + i, n, wide), d, n);
          for (int64_t j = 0; j < n; ++j) gx[i + j] = gy[i + j] * d[j];
        }
      });
    }
  });
  return out;
}

}  // namespace packrat::cpu
