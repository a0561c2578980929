// CpuBackend: pointwise activations by id. The vectorised loops are core/cpu/pointwise_loops.h's
// (also the Pointwise table's, which the quantizing stores' CPU kernels use); here they run in
// parallel chunks.
#include <algorithm>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/loops.h"
#include "core/cpu/pointwise_loops.h"

namespace packrat::cpu {

namespace {

using Loop = PointwiseLoop;

Loop derivative_loop(const PointwiseLoops& fn, bool from_output) {
  if (!from_output) return fn.derivative;
  PACKRAT_CHECK(fn.derivative_from_output, "{}: f' cannot be computed from the output", fn.name);
  return fn.derivative_from_output;
}

Tensor run_loop(Loop loop, const Tensor& x, const char* what) {
  x.check_dtype(DType::f32, what);
  Tensor y = Tensor::empty_like(x);
  const float* src = x.data<float>();
  float* dst = y.data<float>();
  parallel_chunks(x.numel(), kPointwiseGrain, [&](int64_t s, int64_t e) { loop(src + s, dst + s, e - s); });
  return y;
}

}  // namespace

Tensor CpuBackend::pointwise_forward(ActivationId id, const Tensor& x) {
  const PointwiseLoops& fn = pointwise_loops(id);
  return run_loop(fn.forward, x, fn.name.data());
}

Tensor CpuBackend::pointwise_derivative(ActivationId id, const Tensor& saved, bool from_output) {
  const PointwiseLoops& fn = pointwise_loops(id);
  return run_loop(derivative_loop(fn, from_output), saved, fn.name.data());
}

Tensor CpuBackend::pointwise_backward(ActivationId id, const Tensor& saved, const Tensor& grad, bool from_output) {
  const PointwiseLoops& fn = pointwise_loops(id);
  saved.check_dtype(DType::f32, fn.name.data());
  grad.check_dtype(DType::f32, fn.name.data());
  PACKRAT_CHECK(saved.numel() == grad.numel() && saved.layout() == grad.layout(),
                "{} backward: gradient {} does not match the saved tensor {}", fn.name, grad.describe(),
                saved.describe());
  Tensor out = Tensor::empty_like(grad);
  const float *x = saved.data<float>(), *gy = grad.data<float>();
  float* gx = out.data<float>();
  const Loop kernel = derivative_loop(fn, from_output);
  parallel_chunks(out.numel(), kPointwiseGrain, [&](int64_t s, int64_t end) {
    constexpr int64_t kChunk = 1024;
    alignas(64) float d[kChunk];  // f' of one chunk, in L1
    for (int64_t i = s; i < end; i += kChunk) {
      const int64_t n = std::min(kChunk, end - i);
      kernel(x + i, d, n);
      for (int64_t j = 0; j < n; ++j) gx[i + j] = gy[i + j] * d[j];
    }
  });
  return out;
}

}  // namespace packrat::cpu
