// The emulated GPU's backend: every primitive flips its operands' storages to the CPU for the
// duration of the call, runs the CPU backend, flips them back, and moves each fresh output into
// the emulated device's allocator (a copy, under the output's tag and the caller's layer).
#include "tests/support/emulated_gpu.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/autocast.h"
#include "core/backend.h"
#include "core/backend_override.h"
#include "core/cpu/cpu_backend.h"
#include "quant/codec/codec_kernels.h"
#include "quant/cpu/cpu_codecs.h"
#include "tests/support/emulated_copy_engine.h"

namespace packrat::testing {

namespace {

constexpr Device kGpu = EmulatedGpu::device();

class HostHeap final : public MemorySource {
 public:
  void* allocate(size_t bytes) override { return std::aligned_alloc(64, bytes); }
  void release(void* p, size_t) override { std::free(p); }
  // Cache every block, without bound, as cudaMalloc's allocator does.
  size_t min_cached_bytes() const override { return 0; }
  int64_t max_cached_bytes() const override { return std::numeric_limits<int64_t>::max(); }
};

// The operands of one call, on the CPU while it lasts.
class OnHost {
 public:
  OnHost() : scope_(Device::cpu()) {}
  template <typename... T>
  explicit OnHost(const T&... ts) : OnHost() {
    (add(ts), ...);
  }
  void add(const Tensor& t) {
    if (!t.defined() || t.device() != kGpu) return;  // a host operand of a copy, or flipped already
    t.storage()->device = Device::cpu();
    flipped_.push_back(t.storage());
  }
  ~OnHost() {
    for (auto& s : flipped_) s->device = kGpu;
  }

 private:
  DeviceScope scope_;  // anything the CPU backend allocates without naming a device stays on the CPU
  std::vector<std::shared_ptr<Storage>> flipped_;
};

class EmulatedBackend final : public Backend {
 public:
  EmulatedBackend() : allocator_(kGpu, std::make_unique<HostHeap>()) {}
  Device device() const override { return kGpu; }
  std::string_view name() const override { return "emulated GPU (the CPU backend on its own allocator)"; }
  Allocator& allocator() override { return allocator_; }

  // A tensor the CPU backend made, moved to this device; operands it returned are here already.
  Tensor adopt(const Tensor& t) {
    if (!t.defined() || !t.is_cpu()) return t;
    Tensor out = Tensor::empty(t.shape(), t.dtype(), t.layout(), t.storage()->allocation->tag(), kGpu);
    if (t.nbytes() > 0) std::memcpy(out.raw(), t.raw(), t.nbytes());
    return out;
  }
  void adopt_into(Tensor& t) { t = adopt(t); }
  Backend& cpu() { return cpu::cpu_backend(); }

  void copy(const Tensor& src, Tensor& dst) override {
    OnHost h(src, dst);
    cpu().copy(src, dst);
  }
  void copy_range(const Tensor& src, int64_t src_offset, Tensor& dst, int64_t dst_offset, int64_t count) override {
    check_copy_range(src, src_offset, dst, dst_offset, count);  // on the emulated device, before OnHost relabels
    OnHost h(src, dst);
    cpu().copy_range(src, src_offset, dst, dst_offset, count);
  }
  void fill(Tensor& t, double value) override {
    OnHost h(t);
    cpu().fill(t, value);
  }
  Tensor to_layout(const Tensor& t, Layout layout) override {
    Tensor y;
    {
      OnHost h(t);
      y = cpu().to_layout(t, layout);
    }
    return adopt(y);
  }
  void convert(const Tensor& src, Tensor& dst) override {
    OnHost h(src, dst);
    cpu().convert(src, dst);
  }
  Tensor conv_input(const Tensor& x, const ConvGeometry& g) override {
    Tensor y;
    {
      OnHost h(x);
      y = cpu().conv_input(x, g);
    }
    return adopt(y);
  }
  Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g,
                      bool keep_weights) override {
    count(convolutions_, tf32_use().convolutions);
    Tensor y;
    {
      OnHost h(x, w, b);
      y = cpu().conv_forward(x, w, b, g, keep_weights);
    }
    return adopt(y);
  }
  Tensor conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g) override {
    count(convolutions_, tf32_use().convolutions);
    Tensor y;
    {
      OnHost h(gy, w);
      y = cpu().conv_backward_data(gy, w, g);
    }
    return adopt(y);
  }
  void conv_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw,
                             Tensor& gb) override {
    count(convolutions_, tf32_use().convolutions);
    {
      OnHost h(x, gy, gw, gb);
      cpu().conv_backward_weights(x, gy, g, gw, gb);
    }
    adopt_into(gw);
    adopt_into(gb);
  }
  Tensor matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, int64_t batch, int64_t M, int64_t K,
                int64_t N, const Tensor& bias, const Shape& out, DType c_dtype = DType::f32) override {
    count(matmuls_, tf32_use().matmuls);
    Tensor y;
    {
      OnHost h(a, b, bias);
      y = cpu().matmul(a, trans_a, b, trans_b, batch, M, K, N, bias, out, c_dtype);
    }
    return adopt(y);
  }
  Tensor column_sums(const Tensor& m, int64_t M, int64_t N) override {
    Tensor y;
    {
      OnHost h(m);
      y = cpu().column_sums(m, M, N);
    }
    return adopt(y);
  }
  void batchnorm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                                  Tensor& mean, Tensor& var) override {
    {
      OnHost h(x, weight, bias, y, mean, var);
      cpu().batchnorm_forward_training(x, weight, bias, eps, y, mean, var);
    }
    adopt_into(y);
    adopt_into(mean);
    adopt_into(var);
  }
  Tensor batchnorm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                                     const Tensor& var, float eps) override {
    Tensor y;
    {
      OnHost h(x, weight, bias, mean, var);
      y = cpu().batchnorm_forward_inference(x, weight, bias, mean, var, eps);
    }
    return adopt(y);
  }
  void batchnorm_backward(const Tensor& x, const Tensor& gy, const Tensor& weight, bool has_bias, const Tensor& mean,
                          const Tensor& var, float eps, bool global_stats, Tensor& dx, Tensor& dweight,
                          Tensor& dbias) override {
    {
      OnHost h(x, gy, weight, mean, var, dx, dweight, dbias);
      cpu().batchnorm_backward(x, gy, weight, has_bias, mean, var, eps, global_stats, dx, dweight, dbias);
    }
    adopt_into(dx);
    adopt_into(dweight);
    adopt_into(dbias);
  }
  void batchnorm_update_running(Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked,
                                const Tensor& mean, const Tensor& var, float momentum, double var_correction) override {
    OnHost h(running_mean, running_var, mean, var);
    if (num_batches_tracked) h.add(*num_batches_tracked);
    cpu().batchnorm_update_running(running_mean, running_var, num_batches_tracked, mean, var, momentum, var_correction);
  }
  Tensor pool_forward(const Tensor& x, const PoolGeometry& g, PoolKind kind, Tensor* argmax) override {
    Tensor y;
    {
      OnHost h(x);
      y = cpu().pool_forward(x, g, kind, argmax);
    }
    if (argmax) adopt_into(*argmax);
    return adopt(y);
  }
  Tensor pool_backward(const Tensor& gy, const Tensor& argmax, const PoolGeometry& g, PoolKind kind,
                       Layout layout) override {
    Tensor y;
    {
      OnHost h(gy, argmax);
      y = cpu().pool_backward(gy, argmax, g, kind, layout);
    }
    return adopt(y);
  }
  DType pool_index_dtype(int64_t window) override { return cpu().pool_index_dtype(window); }
  Tensor adaptive_avgpool_forward(const Tensor& x, int64_t OH, int64_t OW) override {
    Tensor y;
    {
      OnHost h(x);
      y = cpu().adaptive_avgpool_forward(x, OH, OW);
    }
    return adopt(y);
  }
  Tensor adaptive_avgpool_backward(const Tensor& gy, const Shape& x_shape, Layout layout) override {
    Tensor y;
    {
      OnHost h(gy);
      y = cpu().adaptive_avgpool_backward(gy, x_shape, layout);
    }
    return adopt(y);
  }
  Tensor pointwise_forward(ActivationId fn, const Tensor& x) override {
    Tensor y;
    {
      OnHost h(x);
      y = cpu().pointwise_forward(fn, x);
    }
    return adopt(y);
  }
  Tensor pointwise_derivative(ActivationId fn, const Tensor& saved, bool from_output) override {
    Tensor y;
    {
      OnHost h(saved);
      y = cpu().pointwise_derivative(fn, saved, from_output);
    }
    return adopt(y);
  }
  Tensor pointwise_backward(ActivationId fn, const Tensor& saved, const Tensor& grad, bool from_output) override {
    Tensor y;
    {
      OnHost h(saved, grad);
      y = cpu().pointwise_backward(fn, saved, grad, from_output);
    }
    return adopt(y);
  }
  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) override {
    Tensor y;
    {
      OnHost h(a, b);
      y = cpu().binary(op, a, b);
    }
    return adopt(y);
  }
  Tensor scale(const Tensor& a, double s) override {
    Tensor y;
    {
      OnHost h(a);
      y = cpu().scale(a, s);
    }
    return adopt(y);
  }
  void accumulate(Tensor& dst, const Tensor& src) override {
    OnHost h(dst, src);
    cpu().accumulate(dst, src);
  }
  double reduce_sum(const Tensor& x) override {
    OnHost h(x);
    return cpu().reduce_sum(x);
  }
  double reduce_sum_squares(const Tensor& x) override {
    OnHost h(x);
    return cpu().reduce_sum_squares(x);
  }
  Tensor reduce_sum_to(const Tensor& x, const Shape& shape) override {
    Tensor y;
    {
      OnHost h(x);
      y = cpu().reduce_sum_to(x, shape);
    }
    return adopt(y);
  }
  Tensor softmax_forward(const Tensor& x, float scale, DType out) override {
    Tensor y;
    {
      OnHost h(x);
      y = cpu().softmax_forward(x, scale, out);
    }
    return adopt(y);
  }
  Tensor softmax_backward(const Tensor& y, const Tensor& grad, float scale, DType out) override {
    Tensor dx;
    {
      OnHost h(y, grad);
      dx = cpu().softmax_backward(y, grad, scale, out);
    }
    return adopt(dx);
  }
  CrossEntropyOut cross_entropy_forward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                                        bool want_probs, int64_t ignore_index) override {
    CrossEntropyOut o;
    {
      OnHost h(logits, targets);
      o = cpu().cross_entropy_forward(logits, targets, label_smoothing, want_probs, ignore_index);
    }
    return {adopt(o.loss), adopt(o.probs), o.count};
  }
  Tensor cross_entropy_backward(const Tensor& probs, const Tensor& targets, float label_smoothing,
                                const Tensor& grad_loss, int64_t ignore_index, int64_t count) override {
    Tensor y;
    {
      OnHost h(probs, targets, grad_loss);
      y = cpu().cross_entropy_backward(probs, targets, label_smoothing, grad_loss, ignore_index, count);
    }
    return adopt(y);
  }
  LayerNormOut layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) override {
    LayerNormOut o;
    {
      OnHost h(x, weight, bias);
      o = cpu().layernorm_forward(x, weight, bias, eps);
    }
    return {adopt(o.y), adopt(o.mean), adopt(o.rstd)};
  }
  LayerNormGrads layernorm_backward(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                    const Tensor& grad, bool want_dweight, bool want_dbias) override {
    LayerNormGrads o;
    {
      OnHost h(x, mean, rstd, weight, grad);
      o = cpu().layernorm_backward(x, mean, rstd, weight, grad, want_dweight, want_dbias);
    }
    return {adopt(o.dx), adopt(o.dweight), adopt(o.dbias)};
  }
  Tensor dropout_forward(const Tensor& x, float p, float scale, uint64_t seed, uint64_t stream, Tensor* mask) override {
    Tensor y;
    {
      OnHost h(x);
      y = cpu().dropout_forward(x, p, scale, seed, stream, mask);
    }
    if (mask) adopt_into(*mask);
    return adopt(y);
  }
  Tensor mask_scale(const Tensor& grad, const Tensor& mask, float scale) override {
    Tensor y;
    {
      OnHost h(grad, mask);
      y = cpu().mask_scale(grad, mask, scale);
    }
    return adopt(y);
  }
  int64_t fill_uniform(Tensor& t, float lo, float hi, uint64_t seed, uint64_t stream, uint64_t counter) override {
    OnHost h(t);
    return cpu().fill_uniform(t, lo, hi, seed, stream, counter);
  }
  int64_t fill_normal(Tensor& t, float mean, float std, uint64_t seed, uint64_t stream, uint64_t counter) override {
    OnHost h(t);
    return cpu().fill_normal(t, mean, std, seed, stream, counter);
  }
  Tensor embedding_forward(const Tensor& weight, const Tensor& ids) override {
    Tensor y;
    {
      OnHost h(weight, ids);
      y = cpu().embedding_forward(weight, ids);
    }
    return adopt(y);
  }
  Tensor embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num) override {
    Tensor y;
    {
      OnHost h(grad, ids);
      y = cpu().embedding_backward(grad, ids, num);
    }
    return adopt(y);
  }
  Tensor transpose_last2(const Tensor& x) override {
    Tensor y;
    {
      OnHost h(x);
      y = cpu().transpose_last2(x);
    }
    return adopt(y);
  }
  Tensor pad_channels_subsample(const Tensor& x, int64_t out_channels, int64_t stride) override {
    Tensor y;
    {
      OnHost h(x);
      y = cpu().pad_channels_subsample(x, out_channels, stride);
    }
    return adopt(y);
  }
  Tensor pad_channels_subsample_backward(const Tensor& grad, const Shape& x_shape, Layout x_layout,
                                         int64_t stride) override {
    Tensor y;
    {
      OnHost h(grad);
      y = cpu().pad_channels_subsample_backward(grad, x_shape, x_layout, stride);
    }
    return adopt(y);
  }
  Tensor permute(const Tensor& x, std::span<const int64_t> perm) override {
    Tensor y;
    {
      OnHost h(x);
      y = cpu().permute(x, perm);
    }
    return adopt(y);
  }
  Tensor concat(std::span<const Tensor> xs, int64_t dim) override {
    Tensor y;
    {
      OnHost h;
      for (const Tensor& x : xs) h.add(x);
      y = cpu().concat(xs, dim);
    }
    return adopt(y);
  }
  Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) override {
    Tensor y;
    {
      OnHost h(x);
      y = cpu().narrow(x, dim, start, length);
    }
    return adopt(y);
  }
  void causal_mask_fill(Tensor& scores) override {
    OnHost h(scores);
    cpu().causal_mask_fill(scores);
  }
  void key_padding_fill(Tensor& scores, const Tensor& key_lengths) override {
    OnHost h(scores, key_lengths);
    cpu().key_padding_fill(scores, key_lengths);
  }
  Tensor sequence_lengths(const Tensor& tokens, int64_t pad) override {
    Tensor y;
    {
      OnHost h(tokens);
      y = cpu().sequence_lengths(tokens, pad);
    }
    return adopt(y);
  }
  AttentionOut attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_lengths,
                                 const AttentionArgs& a) override {
    AttentionOut o;
    {
      OnHost h(q, k, v, key_lengths);
      o = cpu().attention_forward(q, k, v, key_lengths, a);
    }
    return {adopt(o.y), adopt(o.lse)};
  }
  AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                    const Tensor& lse, const Tensor& grad, const Tensor& key_lengths,
                                    const AttentionArgs& a, bool want_dq, bool want_dk, bool want_dv) override {
    AttentionGrads o;
    {
      OnHost h(q, k, v, y, lse, grad, key_lengths);
      o = cpu().attention_backward(q, k, v, y, lse, grad, key_lengths, a, want_dq, want_dk, want_dv);
    }
    return {adopt(o.dq), adopt(o.dk), adopt(o.dv)};
  }
  void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) override {
    OnHost h(param, grad, momentum_buffer);
    cpu().sgd_update(param, grad, momentum_buffer, s);
  }
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& s) override {
    OnHost h(param, grad, m, v);
    cpu().adamw_update(param, grad, m, v, s);
  }

  CopyEngine* copy_engine() override { return &copies_; }
  EmulatedCopyEngine& copies() { return copies_; }

  EmulatedGpu::Tf32Calls convolutions_, matmuls_;
  static void count(EmulatedGpu::Tf32Calls& calls, bool tf32) { ++(tf32 ? calls.with_tf32 : calls.without); }

 private:
  Allocator allocator_;
  EmulatedCopyEngine copies_{kGpu};
};

// The compression codecs on the device: the CPU's kernels, on its (host) memory.
class EmulatedCodecs final : public CodecKernels {
 public:
  // The CPU's kernels walk no NHWC tensor, so an NHWC tensor goes through a plain copy here unless
  // a test of the codecs' plans says otherwise (EmulatedGpu::claim_nhwc_walks).
  bool walks_nhwc() const override { return claims_nhwc_walks; }
  bool claims_nhwc_walks = false;
  void quantize_groups(const Tensor& x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                       const Tensor& codes, const Tensor& meta, std::vector<double>* group_range_sq,
                       const CodecWalk& walk) override {
    OnHost h(x, codes, meta);
    cpu_codecs().quantize_groups(x, g, rounding, noise, codes, meta, group_range_sq, walk);
  }
  void dequantize_groups(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, const Tensor& out,
                         const CodecWalk& walk) override {
    OnHost h(codes, meta, out);
    cpu_codecs().dequantize_groups(codes, meta, g, out, walk);
  }
  void dequantize_groups_apply(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, ActivationId fn,
                               bool from_output, const Tensor& grad, const Tensor& gx,
                               const CodecWalk& walk) override {
    PACKRAT_CHECK(walk.channels == 0, "dequantize_groups_apply: a blocked walk on {}", codes.device().str());
    OnHost h(codes, meta, grad, gx);
    cpu_codecs().dequantize_groups_apply(codes, meta, g, fn, from_output, grad, gx, walk);
  }
  // The CPU kernel's buffers, moved to the device.
  MixedPacked quantize_mixed(const Tensor& x, const MixedQuantConfig& c, const QuantNoise& noise) override {
    MixedPacked p;
    {
      OnHost h(x);
      p = cpu_codecs().quantize_mixed(x, c, noise);
    }
    for (Tensor* t : {&p.codes, &p.meta_data, &p.flags})
      if (t->defined()) *t = t->to(kGpu);
    return p;
  }
  void dequantize_mixed(const MixedPacked& p, const Tensor& out) override {
    OnHost h(p.codes, p.meta_data, p.flags, out);
    cpu_codecs().dequantize_mixed(p, out);
  }
  void dequantize_mixed_apply(const MixedPacked& p, ActivationId fn, bool from_output, const Tensor& grad,
                              const Tensor& gx) override {
    OnHost h(p.codes, p.meta_data, p.flags, grad, gx);
    cpu_codecs().dequantize_mixed_apply(p, fn, from_output, grad, gx);
  }
  void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const Tensor& src, const Tensor& y,
                     const Tensor& packed) override {
    OnHost h(src, y, packed);
    cpu_codecs().fewbit_encode(c, fn, src, y, packed);
  }
  void fewbit_decode(const FewbitCoder& c, const Tensor& packed, const Tensor& grad, const Tensor& out) override {
    OnHost h(packed, grad, out);
    cpu_codecs().fewbit_decode(c, packed, grad, out);
  }
  void fp8_encode(const Tensor& x, Fp8Format f, Fp8Scale s, const Fp8Geometry& g, const Tensor& codes,
                  const Tensor& scales) override {
    OnHost h(x, codes, scales);
    cpu_codecs().fp8_encode(x, f, s, g, codes, scales);
  }
  void fp8_decode(const Tensor& codes, const Tensor& scales, Fp8Format f, const Fp8Geometry& g,
                  const Tensor& out) override {
    OnHost h(codes, scales, out);
    cpu_codecs().fp8_decode(codes, scales, f, g, out);
  }
  int64_t pack_codes(const Tensor& src, int bits, const Tensor& packed) override {
    OnHost h(src, packed);
    return cpu_codecs().pack_codes(src, bits, packed);
  }
  void unpack_codes(const Tensor& packed, int bits, const Tensor& out) override {
    OnHost h(packed, out);
    cpu_codecs().unpack_codes(packed, bits, out);
  }
};

EmulatedCodecs& codecs() {
  static EmulatedCodecs* c = new EmulatedCodecs();
  return *c;
}

EmulatedBackend& instance() {
  static EmulatedBackend* b = new EmulatedBackend();  // never destroyed, like the real backends
  return *b;
}

}  // namespace

EmulatedGpu::EmulatedGpu() {
  instance().convolutions_ = instance().matmuls_ = {};
  codecs().claims_nhwc_walks = false;
  set_backend_override(kGpu, &instance());
  set_codecs(kGpu, &codecs());
}
EmulatedGpu::~EmulatedGpu() {
  instance().copies().reset();
  set_codecs(kGpu, nullptr);
  set_backend_override(kGpu, nullptr);
}
Allocator& EmulatedGpu::allocator() { return instance().allocator(); }
EmulatedCopyEngine& EmulatedGpu::copy_engine() { return instance().copies(); }
void EmulatedGpu::claim_nhwc_walks() { codecs().claims_nhwc_walks = true; }
EmulatedGpu::Tf32Calls EmulatedGpu::convolutions() const { return instance().convolutions_; }
EmulatedGpu::Tf32Calls EmulatedGpu::matmuls() const { return instance().matmuls_; }

}  // namespace packrat::testing
