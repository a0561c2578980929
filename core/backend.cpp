#include "core/backend.h"
#include "core/backend_override.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "core/autocast.h"
#include "core/build_config.h"
#include "core/cpu/cpu_backend.h"
#include "core/error.h"
#if PACKRAT_HAVE_CUDA
#include "core/cuda/cuda_backend.h"
#endif

namespace packrat {

namespace {
std::atomic<Backend*> g_override{nullptr};  // set_backend_override
std::atomic<ConvAlgorithm> g_conv_algorithm{std::getenv("PACKRAT_CONV_DIRECT") ? ConvAlgorithm::Direct
                                                                              : ConvAlgorithm::Auto};

// The setting in ConvGeometry::key(), so that plans cached under one are not reused under another.
const char* conv_algorithm_suffix() {
  switch (g_conv_algorithm.load()) {
    case ConvAlgorithm::Direct: return ",direct";
    case ConvAlgorithm::Deterministic: return ",deterministic";
    default: return ",auto";
  }
}
}  // namespace

void set_conv_algorithm(ConvAlgorithm a) { g_conv_algorithm = a; }
ConvAlgorithm conv_algorithm_setting() { return g_conv_algorithm.load(); }

std::string ConvGeometry::key() const {
  return fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}", N, Cin, H, W, Cout, KH, KW, OH, OW, stride_h,
                     stride_w, pad_h, pad_w, dilation_h, dilation_w, groups) +
         (has_bias ? ",b" : "") + conv_algorithm_suffix() + (dtype == DType::f32 ? "" : "," + std::string(dtype_name(dtype))) +
         (tf32_use().convolutions ? ",tf32" : "");
}

void set_backend_override(Device device, Backend* b) {
  PACKRAT_CHECK(!device.is_cpu() && (b == nullptr || b->device() == device),
                "set_backend_override: {} cannot be served by another backend", device.str());
  g_override = b;
}

Backend& backend(Device device) {
  if (device.is_cpu()) return cpu::cpu_backend();
  if (Backend* o = g_override.load(std::memory_order_acquire); o != nullptr && o->device() == device) return *o;
#if PACKRAT_HAVE_CUDA
  return cuda::cuda_backend(device.index);
#else
  fail("device {}: packrat was built without CUDA (configure with the CUDA toolkit and cuDNN to train on a GPU)",
       device.str());
#endif
}

std::vector<Backend*> available_backends() {
  std::vector<Backend*> all{&cpu::cpu_backend()};
#if PACKRAT_HAVE_CUDA
  for (int i = 0; i < cuda::device_count(); ++i) all.push_back(&cuda::cuda_backend(i));
#endif
  return all;
}

Tensor Backend::conv_backward_data_into(const Tensor& gy, const Tensor& w, const ConvGeometry& g, Tensor& into) {
  accumulate(into, conv_backward_data(gy, w, g));
  return into;
}

Tensor Backend::reduce_sum_of_product_to(const Tensor& g, const Tensor& a, const Shape& shape) {
  return reduce_sum_to(binary(BinaryOp::Mul, g, a.to(g.dtype())), shape);
}

void Backend::sgd_update_many(std::span<const SgdOperands> operands, const SgdStep& s) {
  for (const SgdOperands& o : operands) {
    SgdStep step = s;
    step.first = o.first;
    Tensor none;
    sgd_update(*o.param, *o.grad, o.momentum_buffer ? *o.momentum_buffer : none, step);
  }
}

void check_running_update(const Tensor& running_mean, const Tensor& running_var, const Tensor* num_batches_tracked,
                          const Tensor& mean, const Tensor& var) {
  PACKRAT_CHECK(!num_batches_tracked || (num_batches_tracked->dtype() == DType::i64 && num_batches_tracked->numel() == 1),
                "{} (batchnorm_update_running): the batch counter is {}, expected a one-element i64",
                op_where("batchnorm"), num_batches_tracked ? num_batches_tracked->describe() : "");
  for (const Tensor* t : {&running_mean, &running_var, &mean, &var})
    PACKRAT_CHECK(t->defined() && t->dtype() == DType::f32 && t->rank() == 1 && t->numel() == mean.numel(),
                  "{} (batchnorm_update_running): running mean {}, running var {}, batch mean {} and batch var {} "
                  "must be (C) f32 tensors of one size",
                  op_where("batchnorm"), running_mean.describe(), running_var.describe(), mean.describe(),
                  var.describe());
}

void check_copy_range(const Tensor& src, int64_t src_offset, const Tensor& dst, int64_t dst_offset, int64_t count) {
  PACKRAT_CHECK(src.device() == dst.device(), "copy_range: from {} to {}; both must be on one device", src.device().str(),
                dst.device().str());
  PACKRAT_CHECK(src.dtype() == dst.dtype() && src.layout() == Layout::Plain && dst.layout() == Layout::Plain,
                "copy_range: {} into {}: plain tensors of one dtype", src.describe(), dst.describe());
  PACKRAT_CHECK(count >= 0 && src_offset >= 0 && dst_offset >= 0 && src_offset + count <= src.numel() &&
                    dst_offset + count <= dst.numel(),
                "copy_range: {} elements from offset {} of {} to offset {} of {} run past a buffer", count, src_offset,
                src.describe(), dst_offset, dst.describe());
}

void check_same_device(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  size_t first_index = 0, i = 0;
  for (const Tensor* t : tensors) {
    if (t && t->defined()) {
      if (!first) {
        first = t;
        first_index = i;
      } else if (t->device() != first->device()) {
        fail("{}: input {} is on {}, input {} on {}", op_where(op), first_index, first->device().str(), i,
             t->device().str());
      }
    }
    ++i;
  }
}

int64_t check_attention_operands(const char* what, const Backend& be, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& key_lengths, const Backend::AttentionArgs& a) {
  PACKRAT_CHECK(be.attention_reads(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
                "{}: expects q, k, v of one dtype the {} backend reads (f32{}), got {}, {}, {}", what,
                be.device().str(), be.attention_reads(DType::bf16) ? " or bf16" : "", dtype_name(q.dtype()),
                dtype_name(k.dtype()), dtype_name(v.dtype()));
  const int64_t G = a.T > 0 && a.E > 0 ? q.numel() / (a.T * a.E) : 0;
  PACKRAT_CHECK(q.numel() == G * a.T * a.E && k.numel() == G * a.S * a.E && v.numel() == G * a.S * a.Ev,
                "{}: q {}, k {}, v {} are not (G, {}, {}), (G, {}, {}), (G, {}, {})", what, q.shape().str(),
                k.shape().str(), v.shape().str(), a.T, a.E, a.S, a.E, a.S, a.Ev);
  if (key_lengths.defined())
    PACKRAT_CHECK(key_lengths.dtype() == DType::i64 && a.heads > 0 && key_lengths.numel() * a.heads == G,
                  "{}: key lengths {} do not give one length per sample of {} heads ({} heads of {} each)", what,
                  key_lengths.describe(), G, G / std::max<int64_t>(a.heads, 1), a.heads);
  return G;
}

void check_attention_outputs(const Tensor& y, const Tensor& lse, const Tensor& grad, DType data, int64_t G,
                             const Backend::AttentionArgs& a) {
  PACKRAT_CHECK(y.dtype() == data && lse.dtype() == DType::f32 && grad.dtype() == DType::f32,
                "attention_backward: expects the output in q's dtype {} and f32 lse and gradient, got {}, {}, {}",
                dtype_name(data), dtype_name(y.dtype()), dtype_name(lse.dtype()), dtype_name(grad.dtype()));
  PACKRAT_CHECK(y.numel() == G * a.T * a.Ev && grad.numel() == G * a.T * a.Ev && lse.numel() == G * a.T,
                "attention_backward: output {}, its gradient {} or lse {} do not match (G {}, T {}, Ev {})",
                y.shape().str(), grad.shape().str(), lse.shape().str(), G, a.T, a.Ev);
}

int64_t check_key_padding(const Tensor& scores, const Tensor& key_lengths) {
  PACKRAT_CHECK(scores.dtype() == DType::f32 && scores.layout() == Layout::Plain && scores.rank() >= 3,
                "key_padding_fill: expects plain f32 scores (B, ..., T, S), got {}", scores.shape().str());
  const int64_t B = scores.dim(0), S = scores.dim(-1);
  PACKRAT_CHECK(key_lengths.dtype() == DType::i64 && key_lengths.numel() == B,
                "key_padding_fill: expects {} key lengths (i64) for scores {}, got {}", B, scores.shape().str(),
                key_lengths.describe());
  return B == 0 || S == 0 ? 0 : scores.numel() / S / B;
}

}  // namespace packrat
