// Softmax over the last dimension. Saves its output (Need::Value), as PyTorch does; backward is
// dx = y * (g - sum(g * y)) per row.
#include <string>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("softmax")

Tensor softmax(const Tensor& x_any) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(x_any.defined(), "softmax {}: the input is undefined", layer);
  PACKRAT_CHECK(x_any.rank() >= 1 && x_any.numel() > 0, "softmax {}: needs a non-empty input, got {}", layer,
                x_any.shape().str());
  PACKRAT_CHECK(is_f32_or_half(x_any.dtype()), "softmax {}: expects an f32, bf16 or f16 input, got {}", layer,
                dtype_name(x_any.dtype()));
  // 16-bit x (autocast): computed in f32, y (saved) in x's dtype; the kernels read and write it
  // where the backend's rows_read it, else f32 copies.
  Backend& be = backend_of(x_any);
  const DType data = x_any.dtype();
  Tensor y = in_dtype(be.softmax_forward(rows_operand(be, x_any), 1.0f, rows_dtype(be, data)), data);  // (..., D) plain
  if (needs_grad({&x_any})) {
    SaveRequest req;
    req.need = Need::Value;
    req.op = "softmax";
    req.name = layer;
    SavedHandle h = save_for_backward(y, req);
    const Layout x_layout = x_any.layout();
    record("softmax", {&x_any}, {&y}, {h}, [x_layout, data](Node& n, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      Backend& b = backend_of(g[0]);
      const Tensor yv = n.load(0, rows_dtype(b, data));  // as the kernel reads it (a compressing store decodes into it)
      const Tensor gx = b.softmax_backward(yv, g[0], 1.0f, DType::f32);  // (..., D) plain
      return {gx.to_layout(x_layout)};
    });
  }
  return y;
}

}  // namespace packrat::ops
