// Embedding lookup: ids (N...) i64 in [0, num), weight (num, D) -> (N..., D). Saves the ids
// (Need::Index); backward scatters the output gradient into the rows of the weight gradient.
#include <bit>
#include <string>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("embedding")

Tensor embedding(const Tensor& ids, const Tensor& weight) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(ids.defined() && weight.defined(), "embedding {}: ids or weight is undefined", layer);
  PACKRAT_CHECK(ids.dtype() == DType::i64, "embedding {}: ids must be i64, got {} {}", layer, ids.shape().str(),
                dtype_name(ids.dtype()));
  PACKRAT_CHECK(weight.rank() == 2 && weight.dtype() == DType::f32,
                "embedding {}: weight must be a 2-d f32 (num, dim) tensor, got {} {}", layer, weight.shape().str(),
                dtype_name(weight.dtype()));
  check_same_device("embedding", {&ids, &weight});
  const int64_t num = weight.dim(0);
  Tensor y = backend_of(weight).embedding_forward(weight, ids);  // (N..., D)

  if (needs_grad({&weight})) {
    SaveRequest req;
    req.need = Need::Index;
    req.op = "embedding";
    req.name = layer;
    req.index_bits = std::max<int64_t>(1, std::bit_width(static_cast<uint64_t>(num - 1)));
    SavedHandle h = save_for_backward(ids, req);
    record("embedding", {&ids, &weight}, {&y}, {h},
           [num](Node& node, const std::vector<Tensor>& g) -> std::vector<Tensor> {
             const Tensor saved_ids = node.load(0);
             Tensor gw = backend_of(g[0]).embedding_backward(g[0], saved_ids, num);  // (num, D)
             return {Tensor(), gw};
           });
  }
  return y;
}

}  // namespace packrat::ops
