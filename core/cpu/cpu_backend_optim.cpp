// CpuBackend: fused optimizer updates (one pass over param, grad and the state); the
// per-element step is core/optim_math.h's.
#include "core/cpu/cpu_backend.h"
#include "core/cpu/loops.h"
#include "core/optim_math.h"

namespace packrat::cpu {

void CpuBackend::sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& st) {
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  const int64_t n = param.numel();
  const float rate = st.lr, wd = st.weight_decay;
  const float mom = st.momentum, damp = 1.0f - st.dampening;
  if (!momentum_buffer.defined()) {
    parallel_chunks(n, kPointwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) p[k] = sgd_step(p[k], g[k], rate, wd);
    });
    return;
  }
  float* buf = momentum_buffer.data<float>();
  const bool nesterov = st.nesterov, first = st.first;
  parallel_chunks(n, kPointwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) sgd_momentum_step(p[k], g[k], buf[k], rate, wd, mom, damp, nesterov, first);
  });
  momentum_buffer.bump_version();
}

void CpuBackend::adamw_update(Tensor& param, const Tensor& grad, Tensor& m_t, Tensor& v_t, const AdamWStep& st) {
  const float decay = st.decay, b1 = st.beta1, b2 = st.beta2;
  const float step_size = st.step_size, bc2_sqrt = st.bc2_sqrt, eps = st.eps;
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* m = m_t.data<float>();
  float* v = v_t.data<float>();
  parallel_chunks(param.numel(), kPointwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) adamw_step(p[k], g[k], m[k], v[k], decay, b1, b2, step_size, bc2_sqrt, eps);
  });
  m_t.bump_version();
  v_t.bump_version();
}

}  // namespace packrat::cpu
