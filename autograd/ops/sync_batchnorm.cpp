// Synchronised batchnorm2d (autograd/batchnorm_sync.h). Forward: the local mean and biased
// variance (C) from the backend, combined over processes as
//   mean = sum_r n_r m_r / n,   var = sum_r n_r (v_r + (m_r - mean)^2) / n
// (stable: no E[x^2] - mean^2), then y = the inference-mode normalisation with (mean, var).
// Backward, with g = dL/dy of the global loss and xhat = (x - mean) rstd:
//   dx = w rstd (g - sum_all(g) / n - xhat sum_all(g xhat) / n)
// This process receives gy = dL_r/dy = g / share, so it adds the correction
//   c = -(sum_all(share gy) + xhat sum_all(share gy xhat)) / (n share)
// to gy and runs the backend's fixed-statistics backward: dx = w rstd (gy + c). The correction is
// a per-channel affine map of xhat, which the inference-mode normalisation computes.
// Saves x (Need::Value, compressible), the global mean and variance (exact) and the weight.
#include <cmath>
#include <mutex>

#include "autograd/batchnorm_sync.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/backend.h"

namespace packrat {

namespace {
std::mutex g_sync_mutex;
std::shared_ptr<const BatchnormSync> g_sync;
}  // namespace

void set_batchnorm_sync(std::shared_ptr<const BatchnormSync> sync) {
  std::lock_guard lock(g_sync_mutex);
  g_sync = std::move(sync);
}

std::shared_ptr<const BatchnormSync> batchnorm_sync() {
  std::lock_guard lock(g_sync_mutex);
  return g_sync;
}

namespace ops {

namespace {
Tensor as(DType dtype, const Tensor& t) {  // t converted (same shape)
  Tensor out = Tensor::empty(t.shape(), dtype);
  backend_of(t).convert(t, out);
  return out;
}

// t (C) summed over processes, in double; returned as f64.
Tensor sum_over_processes(const BatchnormSync& sync, const Tensor& t, const std::string& what) {
  Tensor d = t.dtype() == DType::f64 ? t.clone() : as(DType::f64, t);
  sync.sum(d.data<double>(), d.numel(), what);
  return d;
}
}  // namespace

Tensor sync_batchnorm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                        Tensor& running_var, float momentum, float eps, const BatchnormSync& sync,
                        Tensor* num_batches_tracked) {
  const std::string where = op_where("sync_batchnorm2d");
  PACKRAT_CHECK(x.defined() && x.rank() == 4 && x.dtype() == DType::f32,
                "{}: input must be a 4-d f32 tensor (N, C, H, W)", where);
  PACKRAT_CHECK(weight.defined() && bias.defined(),
                "{}: synchronised batchnorm needs an affine layer (weight and bias); distributed.sync_batchnorm: false "
                "normalises per process", where);
  Backend& be = backend_of(x);
  const double n_local = static_cast<double>(x.dim(0) * x.dim(2) * x.dim(3));
  double n = n_local;  // values per channel in the global batch
  sync.sum(&n, 1, where + " count");
  PACKRAT_CHECK(n > 1, "{}: training needs more than one value per channel in the global batch", where);
  const double share = n_local / n;

  Tensor mean, var, y;  // (C), (C) f32; (N, C, H, W) x's layout
  {
    Tensor local_y, m32, v32;  // this process's statistics
    be.batchnorm_forward_training(x, Tensor(), Tensor(), eps, local_y, m32, v32);
    const Tensor m = as(DType::f64, m32), v = as(DType::f64, v32);  // (C) f64
    const Tensor mean64 = be.scale(sum_over_processes(sync, be.scale(m, n_local), where + " mean"), 1.0 / n);
    const Tensor d = be.binary(BinaryOp::Sub, m, mean64);
    const Tensor spread = be.scale(be.binary(BinaryOp::Add, v, be.binary(BinaryOp::Mul, d, d)), n_local);
    mean = as(DType::f32, mean64);
    var = as(DType::f32, be.scale(sum_over_processes(sync, spread, where + " variance"), 1.0 / n));
  }
  y = be.batchnorm_forward_inference(x, weight, bias, mean, var, eps);
  if (running_mean.defined()) update_running(running_mean, running_var, num_batches_tracked, mean, var, momentum, n);
  if (!needs_grad({&x, &weight, &bias})) return y;

  std::vector<SavedHandle> saved = save_batchnorm_inputs(x, mean, var, weight);
  const Layout x_layout = x.layout();
  const auto sum = sync.sum;
  record("sync_batchnorm2d", {&x, &weight, &bias}, {&y}, std::move(saved),
         [=](Node& nd, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
           const Tensor xs = nd.load(0).to_layout(x_layout);
           const Tensor m = nd.load(1), v = nd.load(2), w = nd.load(3);
           Backend& b = backend_of(xs);
           const Tensor gy = grads[0].to_layout(x_layout);
           Tensor dx0, dw, db;  // dw = sum(gy xhat), db = sum(gy): this process's, (C) each
           b.batchnorm_backward(xs, gy, w, true, m, v, eps, /*global_stats=*/true, dx0, dw, db);
           BatchnormSync s{sum};
           // (C) f64: sum_all(g), sum_all(g xhat)
           const Tensor sum_g = sum_over_processes(s, b.scale(as(DType::f64, db), share), nd.where() + " gradient sum");
           const Tensor sum_gx =
               sum_over_processes(s, b.scale(as(DType::f64, dw), share), nd.where() + " gradient-input sum");
           const double k = -1.0 / (n * share);
           const Tensor c = b.batchnorm_forward_inference(xs, as(DType::f32, b.scale(sum_gx, k)),
                                                          as(DType::f32, b.scale(sum_g, k)), m, v, eps);
           Tensor dx, unused_w, unused_b;
           b.batchnorm_backward(xs, b.binary(BinaryOp::Add, gy, c), w, false, m, v, eps, true, dx, unused_w, unused_b);
           std::vector<Tensor> r(3);
           if (nd.inputs[0]) r[0] = dx;
           if (nd.inputs[1]) r[1] = dw;
           if (nd.inputs[2]) r[2] = db;
           return r;
         });
  return y;
}

}  // namespace ops
}  // namespace packrat
