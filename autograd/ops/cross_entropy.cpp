// Cross-entropy from logits, mean over the batch, with PyTorch's label smoothing:
//   loss_n = (1 - eps) * (-log p[n, t_n]) + eps * mean_c(-log p[n, c]),  loss = mean_n loss_n,
// i.e. the target distribution q = (1 - eps) onehot(t) + eps / C. Saves the probabilities
// (exact: the most sensitive tensor in GACT's study) and the targets; backward is
// dlogits = (p - q) / N * g.
#include <bit>
#include <cmath>
#include <string>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/tape.h"
#include "autograd/ops/eltwise_common.h"
#include "core/parallel.h"

namespace packrat::ops {

Tensor cross_entropy(const Tensor& logits_any, const Tensor& targets, float label_smoothing) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(logits_any.defined() && targets.defined(), "cross_entropy {}: logits or targets is undefined", layer);
  PACKRAT_CHECK(logits_any.rank() == 2 && logits_any.dtype() == DType::f32,
                "cross_entropy {}: logits must be 2-d f32 (N, C), got {} {}", layer, logits_any.shape().str(),
                dtype_name(logits_any.dtype()));
  PACKRAT_CHECK(targets.dtype() == DType::i64, "cross_entropy {}: targets must be i64 class indices, got {} {}", layer,
                targets.shape().str(), dtype_name(targets.dtype()));
  const int64_t N = logits_any.dim(0), C = logits_any.dim(1);
  PACKRAT_CHECK(targets.rank() == 1 && targets.dim(0) == N,
                "cross_entropy {}: targets must have shape ({},) to match logits {}, got {}", layer, N,
                logits_any.shape().str(), targets.shape().str());
  PACKRAT_CHECK(N > 0 && C > 0, "cross_entropy {}: empty logits {}", layer, logits_any.shape().str());
  PACKRAT_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f,
                "cross_entropy {}: label_smoothing must be in [0, 1], got {}", layer, label_smoothing);
  const int64_t* t = targets.data<int64_t>();
  for (int64_t i = 0; i < N; ++i)
    PACKRAT_CHECK(t[i] >= 0 && t[i] < C, "cross_entropy {}: target {} of sample {} is out of range [0, {})", layer,
                  t[i], i, C);

  const Tensor logits = logits_any.to_plain();
  const float* x = logits.data<float>();
  const bool grad = needs_grad({&logits_any});
  Tensor probs = grad ? Tensor::empty(Shape{N, C}) : Tensor();  // (N, C)
  std::vector<double> row_loss(static_cast<size_t>(N));
  const double eps = label_smoothing;
  detail::rows_for(N, 4 * C, [&](int64_t n) {
    const float* r = x + n * C;
    float mx = r[0];
    for (int64_t c = 1; c < C; ++c) mx = std::max(mx, r[c]);
    double sum = 0, sum_shifted = 0;  // sum exp(x - max), sum (x - max)
    for (int64_t c = 0; c < C; ++c) {
      const double s = static_cast<double>(r[c]) - mx;
      sum += std::exp(s);
      sum_shifted += s;
    }
    const double lse = std::log(sum);  // log p[c] = (x[c] - max) - lse
    const double nll = lse - (static_cast<double>(r[t[n]]) - mx);
    const double smooth = lse - sum_shifted / static_cast<double>(C);  // mean_c(-log p[c])
    row_loss[static_cast<size_t>(n)] = (1.0 - eps) * nll + eps * smooth;
    if (grad) {
      float* p = probs.data<float>() + n * C;
      for (int64_t c = 0; c < C; ++c) p[c] = static_cast<float>(std::exp(static_cast<double>(r[c]) - mx - lse));
    }
  });
  double total = 0;
  for (double l : row_loss) total += l;
  Tensor loss = Tensor::empty(Shape());  // scalar
  loss.data<float>()[0] = static_cast<float>(total / static_cast<double>(N));

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
           [N, C, eps_f](Node& node, const std::vector<Tensor>& g) -> std::vector<Tensor> {
             const Tensor p = node.load(0);
             const Tensor tg = node.load(1);
             const float gscale = g[0].to(DType::f32).data<float>()[0] / static_cast<float>(N);
             const float off = eps_f / static_cast<float>(C), on = 1.0f - eps_f + off;
             Tensor gx = Tensor::empty(Shape{N, C});  // (N, C)
             const float* pp = p.data<float>();
             const int64_t* tp = tg.data<int64_t>();
             float* out = gx.data<float>();
             detail::rows_for(N, C, [&](int64_t n) {
               for (int64_t c = 0; c < C; ++c) out[n * C + c] = (pp[n * C + c] - off) * gscale;
               out[n * C + tp[n]] = (pp[n * C + tp[n]] - on) * gscale;
             });
             return {gx, Tensor()};
           });
  }
  return loss;
}

}  // namespace packrat::ops
