// Cross-entropy from logits, mean over the batch, with PyTorch's label smoothing:
//   loss_n = (1 - eps) * (-log p[n, t_n]) + eps * mean_c(-log p[n, c]),  loss = mean_n loss_n,
// i.e. the target distribution q = (1 - eps) onehot(t) + eps / C. With an ignore_index (PyTorch's)
// the samples whose target equals it count for nothing: the mean is over the M others, and
// M = 0 gives loss 0 and a zero gradient (PyTorch: NaN). Saves the probabilities (exact: the most
// sensitive tensor in GACT's study) and the targets (exact, so an ignored target's value is kept
// too); backward is dlogits = (p - q) / M * g, 0 in the rows of ignored targets.
#include <bit>
#include <string>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("cross_entropy")

Tensor cross_entropy(const Tensor& logits_any, const Tensor& targets, float label_smoothing,
                     std::optional<int64_t> ignore_index) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(logits_any.defined() && targets.defined(), "cross_entropy {}: logits or targets is undefined", layer);
  PACKRAT_CHECK(logits_any.rank() == 2 && is_f32_or_half(logits_any.dtype()),
                "cross_entropy {}: logits must be 2-d f32, bf16 or f16 (N, C), got {} {}", layer,
                logits_any.shape().str(), dtype_name(logits_any.dtype()));
  PACKRAT_CHECK(targets.dtype() == DType::i64, "cross_entropy {}: targets must be i64 class indices, got {} {}", layer,
                targets.shape().str(), dtype_name(targets.dtype()));
  const int64_t N = logits_any.dim(0), C = logits_any.dim(1);
  PACKRAT_CHECK(targets.rank() == 1 && targets.dim(0) == N,
                "cross_entropy {}: targets must have shape ({},) to match logits {}, got {}", layer, N,
                logits_any.shape().str(), targets.shape().str());
  PACKRAT_CHECK(N > 0 && C > 0, "cross_entropy {}: empty logits {}", layer, logits_any.shape().str());
  PACKRAT_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f,
                "cross_entropy {}: label_smoothing must be in [0, 1], got {}", layer, label_smoothing);
  PACKRAT_CHECK(!ignore_index || *ignore_index != kNoIgnoreIndex, "cross_entropy {}: ignore_index {} is reserved",
                layer, *ignore_index);
  check_same_device("cross_entropy", {&logits_any, &targets});
  const bool grad = needs_grad({&logits_any});
  const int64_t ignore = ignore_index.value_or(kNoIgnoreIndex);
  // A loss stays f32 under autocast: 16-bit logits are read converted.
  auto [loss, probs, count] =
      backend_of(logits_any).cross_entropy_forward(as_f32(logits_any), targets, label_smoothing, grad, ignore);

  if (grad) {
    SaveRequest req;
    req.need = Need::Value;
    req.op = "cross_entropy";
    req.name = layer;
    req.exact = true;
    SaveRequest treq = req;
    treq.need = Need::Index;
    treq.index_bits = std::max<int64_t>(1, std::bit_width(static_cast<uint64_t>(C - 1)));
    std::vector<SavedHandle> saved{save_for_backward(probs, req), save_for_backward(targets, treq)};
    const float eps_f = label_smoothing;
    record("cross_entropy", {&logits_any, &targets}, {&loss}, std::move(saved),
           [eps_f, ignore, count](Node& node, const std::vector<Tensor>& g) -> std::vector<Tensor> {
             const Tensor p = node.load(0);
             const Tensor tg = node.load(1);
             return {backend_of(p).cross_entropy_backward(p, tg, eps_f, g[0], ignore, count), Tensor()};
           });
  }
  return loss;
}

}  // namespace packrat::ops
