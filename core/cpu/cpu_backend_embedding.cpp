// CpuBackend: embedding gather / scatter-add.
#include <algorithm>
#include <string>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/loops.h"

namespace packrat::cpu {

Tensor CpuBackend::embedding_forward(const Tensor& weight, const Tensor& ids) {
  const std::string& layer = LayerScope::current();
  const int64_t num = weight.dim(0), D = weight.dim(1), n = ids.numel();
  const int64_t* id = ids.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    PACKRAT_CHECK(id[i] >= 0 && id[i] < num, "embedding {}: id {} at position {} is out of range [0, {})", layer, id[i],
                  i, num);
  std::vector<int64_t> dims = ids.shape().dims();
  dims.push_back(D);
  Tensor y = empty_cpu(Shape(dims));  // (N..., D)
  const float* w = weight.data<float>();
  float* out = y.data<float>();
  rows_for(n, D, [&](int64_t i) {
    const float* row = w + id[i] * D;
    for (int64_t j = 0; j < D; ++j) out[i * D + j] = row[j];
  });
  return y;
}

Tensor CpuBackend::embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num) {
  const Tensor go = grad.to_plain();
  const int64_t count = ids.numel(), D = go.dim(-1);
  Tensor gw = empty_cpu(Shape{num, D});  // (num, D)
  fill(gw, 0.0);
  const int64_t* idp = ids.data<int64_t>();
  const float* gp = go.data<float>();
  float* gwp = gw.data<float>();
  // Rows may repeat: split over columns so that no two threads touch one element.
  parallel_chunks(D, std::max<int64_t>(16, kMinParallelWork / std::max<int64_t>(count, 1)), [&](int64_t jb, int64_t je) {
    for (int64_t i = 0; i < count; ++i) {
      float* dst = gwp + idp[i] * D;
      const float* src = gp + i * D;
      for (int64_t j = jb; j < je; ++j) dst[j] += src[j];
    }
  });
  return gw;
}

}  // namespace packrat::cpu
