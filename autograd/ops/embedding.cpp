// Embedding lookup: ids (N...) i64 in [0, num), weight (num, D) -> (N..., D). Saves the ids
// (Need::Index); backward scatters the output gradient into the rows of the weight gradient.
#include <bit>
#include <string>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/tape.h"
#include "autograd/ops/eltwise_common.h"
#include "core/parallel.h"

namespace packrat::ops {

Tensor embedding(const Tensor& ids, const Tensor& weight) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(ids.defined() && weight.defined(), "embedding {}: ids or weight is undefined", layer);
  PACKRAT_CHECK(ids.dtype() == DType::i64, "embedding {}: ids must be i64, got {} {}", layer, ids.shape().str(),
                dtype_name(ids.dtype()));
  PACKRAT_CHECK(weight.rank() == 2 && weight.dtype() == DType::f32,
                "embedding {}: weight must be a 2-d f32 (num, dim) tensor, got {} {}", layer, weight.shape().str(),
                dtype_name(weight.dtype()));
  const int64_t num = weight.dim(0), D = weight.dim(1), n = ids.numel();
  const int64_t* id = ids.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    PACKRAT_CHECK(id[i] >= 0 && id[i] < num, "embedding {}: id {} at position {} is out of range [0, {})", layer, id[i],
                  i, num);

  std::vector<int64_t> dims = ids.shape().dims();
  dims.push_back(D);
  Tensor y = Tensor::empty(Shape(dims));  // (N..., D)
  const float* w = weight.data<float>();
  float* out = y.data<float>();
  detail::rows_for(n, D, [&](int64_t i) {
    const float* row = w + id[i] * D;
    for (int64_t j = 0; j < D; ++j) out[i * D + j] = row[j];
  });

  if (needs_grad({&weight})) {
    SaveRequest req;
    req.need = Need::Index;
    req.op = "embedding";
    req.name = layer;
    req.index_bits = std::max<int64_t>(1, std::bit_width(static_cast<uint64_t>(num - 1)));
    SavedHandle h = save_for_backward(ids, req);
    record("embedding", {&ids, &weight}, {&y}, {h},
           [num, D](Node& node, const std::vector<Tensor>& g) -> std::vector<Tensor> {
             const Tensor saved_ids = node.load(0);
             const Tensor go = g[0].to_plain();
             Tensor gw = Tensor::zeros(Shape{num, D});  // (num, D)
             const int64_t* idp = saved_ids.data<int64_t>();
             const float* gp = go.data<float>();
             float* gwp = gw.data<float>();
             const int64_t count = saved_ids.numel();
             // Rows may repeat: split over columns so that no two threads touch one element.
             parallel_chunks(D, std::max<int64_t>(16, detail::kMinParallelWork / std::max<int64_t>(count, 1)), [&](int64_t jb, int64_t je) {
               for (int64_t i = 0; i < count; ++i) {
                 float* dst = gwp + idp[i] * D;
                 const float* src = gp + i * D;
                 for (int64_t j = jb; j < je; ++j) dst[j] += src[j];
               }
             });
             return {Tensor(), gw};
           });
  }
  return y;
}

}  // namespace packrat::ops
