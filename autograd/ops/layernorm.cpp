// Layer normalization over the last dimension: y = (x - mean) * rstd * weight + bias, with the
// biased variance and rstd = 1 / sqrt(var + eps), as PyTorch. Saves the input (Need::Value),
// the per-row mean and rstd (exact) and the weight (a parameter: never compressed).
// Backward, with xhat = (x - mean) * rstd and gh = g * weight:
//   dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)),  dweight = sum g * xhat,  dbias = sum g.
#include <string>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("layernorm")

Tensor layernorm(const Tensor& x_any, const Tensor& weight, const Tensor& bias, float eps) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(x_any.defined(), "layernorm {}: the input is undefined", layer);
  PACKRAT_CHECK(is_f32_or_half(x_any.dtype()) && x_any.rank() >= 1 && x_any.numel() > 0,
                "layernorm {}: expects a non-empty f32, bf16 or f16 input (..., D), got {} {}", layer,
                x_any.shape().str(), dtype_name(x_any.dtype()));
  const Tensor x = x_any.to_plain();
  const int64_t D = x.dim(-1);
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      PACKRAT_CHECK(p->rank() == 1 && p->dim(0) == D && p->dtype() == DType::f32,
                    "layernorm {}: {} must be f32 of shape ({},) for input {}, got {} {}", layer,
                    p == &weight ? "weight" : "bias", D, x.shape().str(), p->shape().str(), dtype_name(p->dtype()));
  PACKRAT_CHECK(eps >= 0.0f, "layernorm {}: eps must be >= 0, got {}", layer, eps);

  check_same_device("layernorm", {&x_any, &weight, &bias});
  // A 16-bit x (autocast) is saved as it is; computed in f32 with f32 statistics, y in x's dtype
  // (as PyTorch 2's mixed-type layer_norm; 1.13's CPU layer_norm refuses bf16 with f32 weights).
  // The kernels read and write the 16-bit data where the backend's rows_read it, else f32 copies.
  Backend& be = backend_of(x);
  auto [y_rows, mean, rstd] = be.layernorm_forward(rows_operand(be, x), weight, bias, eps);  // (..., D), (R), (R)
  Tensor y = in_dtype(y_rows, x.dtype());

  if (needs_grad({&x_any, &weight, &bias})) {
    SaveRequest req;
    req.need = Need::Value;
    req.op = "layernorm";
    req.name = layer;
    SaveRequest stats = req;
    stats.exact = true;
    std::vector<SavedHandle> saved{save_for_backward(x, req), save_for_backward(mean, stats),
                                   save_for_backward(rstd, stats)};
    const bool has_w = weight.defined(), has_b = bias.defined();
    if (has_w) saved.push_back(save_for_backward(weight, req));
    const Layout x_layout = x_any.layout();
    const DType data = x.dtype();
    record("layernorm", {&x_any, &weight, &bias}, {&y}, std::move(saved),
           [has_w, has_b, x_layout, data](Node& n, const std::vector<Tensor>& g) -> std::vector<Tensor> {
             Backend& b = backend_of(g[0]);
             // x as the kernel reads it (a compressing store decodes into it)
             const Tensor xs = n.load(0, rows_dtype(b, data)), ms = n.load(1), rs = n.load(2);
             const Tensor ws = has_w ? n.load(3) : Tensor();
             auto [gx, gw, gb] = b.layernorm_backward(xs, ms, rs, ws, g[0], has_w, has_b);
             return {gx.to_layout(x_layout), gw, gb};
           });
  }
  return y;
}

}  // namespace packrat::ops
