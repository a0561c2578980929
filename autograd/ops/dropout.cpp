// Inverted dropout. The uniform of element i is a pure function of (seed, stream, i), so any
// element's decision can be recomputed on its own: elements go in blocks of 256, and element
// i = 256 b + r takes word r / 64 of Philox(seed, stream, counter 64 b + r % 64). (This order lets
// 64 Philox counters run side by side in vector lanes and each word fill 64 consecutive
// elements.) Kept where the uniform is >= p. The keep mask is saved as Need::Mask (u8 0/1, as
// PyTorch's bool mask).
#include <string>

#include "autograd/ops.h"
#include "autograd/saved_tensor_store.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("dropout")

Tensor dropout(const Tensor& x, float p, bool training, uint64_t seed, uint64_t stream) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(x.defined(), "dropout {}: the input is undefined", layer);
  PACKRAT_CHECK(p >= 0.0f && p <= 1.0f, "dropout {}: probability must be in [0, 1], got {}", layer, p);
  if (!training || p == 0.0f) return x;
  PACKRAT_CHECK(is_f32_or_half(x.dtype()), "dropout {}: expects an f32, bf16 or f16 input, got {}", layer,
                dtype_name(x.dtype()));

  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;  // p = 1 drops everything, as PyTorch
  const bool grad = needs_grad({&x});
  Tensor mask;  // like x, u8 0/1, when saved for backward
  Backend& be = backend_of(x);
  const Tensor xd = be.dropout_reads(x.dtype()) ? x : as_f32(x);  // what the kernel reads
  Tensor y = in_dtype(be.dropout_forward(xd, p, scale, seed, stream, grad ? &mask : nullptr),
                      x.dtype());  // 16-bit x (autocast): y in its dtype
  if (grad) {
    SaveRequest req;
    req.need = Need::Mask;
    req.op = "dropout";
    req.name = layer;
    SavedHandle h = save_for_backward(mask, req);
    const Layout x_layout = x.layout();
    record("dropout", {&x}, {&y}, {h}, [scale, x_layout](Node& n, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      const Tensor m = n.load(0);
      const Tensor go = g[0].to_layout(m.layout());
      go.check_dtype(DType::f32, "dropout backward");
      return {backend_of(go).mask_scale(go, m, scale).to_layout(x_layout)};
    });
  }
  return y;
}

}  // namespace packrat::ops
