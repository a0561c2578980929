// Stochastic depth, row mode. The per-sample keep decision reuses the dropout primitive on an
// (N, 1, ...) tensor of ones: its output is the (N, 1, ...) noise torchvision multiplies by
// (0 or 1 / (1 - p)) and its u8 mask is what backward needs. The broadcasting multiply then
// stretches the noise over each sample.
#include "autograd/ops/drop_path.h"

#include <string>

#include "autograd/saved_tensor_store.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("drop_path")

namespace {

// (N, 1, ..., 1) with x's rank: one entry per sample.
Shape per_sample_shape(const Tensor& x) {
  std::vector<int64_t> dims(static_cast<size_t>(x.rank()), 1);
  dims[0] = x.dim(0);
  return Shape(dims);
}

// noise = mask ? scale : 0, f32 (N, 1, ...) from the u8 keep mask.
Tensor noise_from_mask(const Tensor& mask, float scale) {
  Backend& be = backend_of(mask);
  Tensor ones = Tensor::empty(mask.shape(), DType::f32, mask.layout(), TagScope::current(), mask.device());
  be.fill(ones, 1.0);
  return be.mask_scale(ones, mask, scale);
}

}  // namespace

Tensor drop_path(const Tensor& x, float p, bool training, uint64_t seed, uint64_t stream) {
  const std::string& layer = LayerScope::current();
  PACKRAT_CHECK(x.defined(), "drop_path {}: the input is undefined", layer);
  PACKRAT_CHECK(p >= 0.0f && p <= 1.0f, "drop_path {}: probability must be in [0, 1], got {}", layer, p);
  if (!training || p == 0.0f) return x;
  PACKRAT_CHECK(is_f32_or_half(x.dtype()), "drop_path {}: expects an f32, bf16 or f16 input, got {}", layer,
                dtype_name(x.dtype()));
  PACKRAT_CHECK(x.rank() >= 1 && x.numel() > 0, "drop_path {}: expects a non-empty (N, ...) input, got {}", layer,
                x.shape().str());
  check_same_device("drop_path", {&x});

  const float survival = 1.0f - p;
  const float scale = survival > 0.0f ? 1.0f / survival : 0.0f;
  Backend& be = backend_of(x);
  Tensor ones = Tensor::empty(per_sample_shape(x), DType::f32, Layout::Plain, TagScope::current(), x.device());
  be.fill(ones, 1.0);
  const bool grad = needs_grad({&x});
  Tensor mask;  // (N, 1, ...) u8 0/1, when saved for backward
  const Tensor noise = be.dropout_forward(ones, p, scale, seed, stream, grad ? &mask : nullptr);  // (N, 1, ...)
  Tensor y = in_dtype(be.binary(BinaryOp::Mul, as_f32(x), noise).to_layout(x.layout()), x.dtype());
  if (grad) {
    SaveRequest req;
    req.need = Need::Mask;
    req.op = "drop_path";
    req.name = layer;
    SavedHandle h = save_for_backward(mask, req);
    const Layout x_layout = x.layout();
    record("drop_path", {&x}, {&y}, {h}, [scale, x_layout](Node& n, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      const Tensor m = n.load(0);
      g[0].check_dtype(DType::f32, "drop_path backward");
      return {backend_of(g[0]).binary(BinaryOp::Mul, g[0], noise_from_mask(m, scale)).to_layout(x_layout)};
    });
  }
  return y;
}

}  // namespace packrat::ops
