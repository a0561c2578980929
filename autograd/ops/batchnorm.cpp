// batchnorm2d on the input's backend (Backend's batchnorm section), in any layout (kept).
// Training saves x (Need::Value, compressible) and the batch mean and biased variance (exact),
// and updates the running statistics in place as PyTorch does (bumping their versions).
#include "autograd/batchnorm_sync.h"
#include "autograd/checkpoint.h"
#include "autograd/ops.h"
#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"

namespace packrat::ops {

PACKRAT_SAVING_OP_KINDS("batchnorm2d")

namespace {
void check_channel_tensor(const std::string& where, const char* what, const Tensor& t, int64_t C) {
  if (!t.defined()) return;
  PACKRAT_CHECK(t.rank() == 1 && t.dim(0) == C, "{}: input has {} channels, {} has shape {}", where, C, what,
                t.shape().str());
  PACKRAT_CHECK(t.dtype() == DType::f32, "{}: {} has dtype {}, expected f32", where, what, dtype_name(t.dtype()));
}

}  // namespace

void update_running(Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked, const Tensor& mean,
                    const Tensor& var, float momentum, double n) {
  if (recomputing()) return;  // a checkpoint segment's second forward: the first one counted the batch
  backend_of(running_mean)
      .batchnorm_update_running(running_mean, running_var, num_batches_tracked, mean, var, momentum, n / (n - 1));
  running_mean.bump_version();
  running_var.bump_version();
  if (num_batches_tracked) num_batches_tracked->bump_version();
}

std::vector<SavedHandle> save_batchnorm_inputs(const Tensor& x, const Tensor& mean, const Tensor& var,
                                               const Tensor& weight) {
  const SaveRequest value{Need::Value, nullptr, "batchnorm2d", LayerScope::current()};
  SaveRequest stats = value;
  stats.exact = true;
  std::vector<SavedHandle> saved;
  saved.push_back(save_for_backward(x, value));
  saved.push_back(save_for_backward(mean, stats));
  saved.push_back(save_for_backward(var, stats));
  if (weight.defined()) saved.push_back(save_for_backward(weight, value));
  return saved;
}

Tensor batchnorm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                   Tensor& running_var, bool training, float momentum, float eps, Tensor* num_batches_tracked) {
  check_same_device("batchnorm2d", {&x, &weight, &bias, &running_mean, &running_var});
  const std::string where = op_where("batchnorm2d");
  PACKRAT_CHECK(x.defined(), "{}: input must be defined", where);
  PACKRAT_CHECK(x.rank() == 4, "{}: input must be 4-d (N, C, H, W), got {}", where, x.shape().str());
  PACKRAT_CHECK(is_f32_or_half(x.dtype()), "{}: input has dtype {}, expected f32, bf16 or f16", where,
                dtype_name(x.dtype()));
  // A 16-bit x (autocast) is saved as it is; the statistics and y are computed in f32 and y
  // comes back in x's dtype. The backend reads it as it is where it can (the CPU's), else an f32
  // copy of it.
  const bool reads_x = backend_of(x).batchnorm_reads(x.dtype());
  const Tensor xf = reads_x ? x : as_f32(x);
  const int64_t C = x.dim(1), n = x.dim(0) * x.dim(2) * x.dim(3);
  check_channel_tensor(where, "weight", weight, C);
  check_channel_tensor(where, "bias", bias, C);
  check_channel_tensor(where, "running_mean", running_mean, C);
  check_channel_tensor(where, "running_var", running_var, C);
  PACKRAT_CHECK(running_mean.defined() == running_var.defined(),
                "{}: running_mean and running_var must both be given or both be undefined", where);

  if (training)  // data-parallel with distributed.sync_batchnorm: statistics of the global batch
    if (const auto sync = batchnorm_sync())
      return sync_batchnorm2d(as_f32(x), weight, bias, running_mean, running_var, momentum, eps, *sync, num_batches_tracked);

  Tensor y, mean, var;  // (N, C, H, W) x's layout; (C); (C)
  const bool global_stats = !training;
  if (training) {
    PACKRAT_CHECK(n > 1, "{}: training needs more than one value per channel, input is {}", where, x.shape().str());
    backend_of(x).batchnorm_forward_training(xf, weight, bias, eps, y, mean, var);
    if (running_mean.defined())
      update_running(running_mean, running_var, num_batches_tracked, mean, var, momentum, static_cast<double>(n));
  } else {
    PACKRAT_CHECK(running_mean.defined(), "{}: eval mode needs running statistics", where);
    y = backend_of(x).batchnorm_forward_inference(xf, weight, bias, running_mean, running_var, eps);
    if (needs_grad({&x, &weight, &bias})) {
      mean = running_mean.clone();  // constants of this forward: later updates must not reach backward
      var = running_var.clone();
    }
  }
  y = in_dtype(y, x.dtype());
  if (!needs_grad({&x, &weight, &bias})) return y;

  std::vector<SavedHandle> saved = save_batchnorm_inputs(x, mean, var, weight);
  const bool has_weight = weight.defined(), has_bias = bias.defined();
  const Layout x_layout = x.layout();
  const DType x_dtype = x.dtype();
  record("batchnorm2d", {&x, &weight, &bias}, {&y}, std::move(saved),
         [=](Node& nd, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
           // A 16-bit x that the kernels read as it lies comes back in its dtype: a compressing
           // store decodes straight into it, half the bytes of an f32 copy.
           const Tensor saved_x = (reads_x ? nd.load(0, x_dtype) : nd.load(0)).to_layout(x_layout);
           const Tensor xs = backend_of(saved_x).batchnorm_reads(saved_x.dtype()) ? saved_x : as_f32(saved_x);
           const Tensor m = nd.load(1), v = nd.load(2);
           const Tensor w = has_weight ? nd.load(3) : Tensor();
           Tensor dx, dw, db;
           backend_of(xs).batchnorm_backward(xs, grads[0], w, has_bias, m, v, eps, global_stats, dx, dw, db);
           std::vector<Tensor> r(3);
           if (nd.inputs[0]) r[0] = dx;
           if (nd.inputs[1]) r[1] = dw;
           if (nd.inputs[2]) r[2] = db;
           return r;
         });
  return y;
}

}  // namespace packrat::ops
