#pragma once
// The per-group store (ActNN; GACT when a bit-width provider drives it): Value and Derivative
// requests are quantized per group to b bits (quant/group/group_quant.h) and backward gets the
// dequantized value, or f' of it; the derivative of a step function (relu family) is kept as an
// exact 1-bit mask instead; masks are packed exactly to 1 bit, indices to r.index_bits bits, and
// exact requests (and non-f32 data) stay FP32. A tensor saved by two ops is quantized once (the
// bookkeeping is quant/store/compressing_store.h's). Packed codes and metadata are u8 tensors
// allocated under the Saved tag on the saved tensor's device, so that device's allocator counts
// every byte and describe() reports them; a GPU tensor is quantized and dequantized there by the
// codec's CUDA kernels (quant/cuda/group_quant_cuda.cu), writing the CPU's bytes.
//
// Randomness: the tensor quantized n-th since begin_step(step) draws its rounding noise from
// the noise hash of (seed, quant_stream(step, n), element) (core/noise_hash.h); set_noise_salt re-draws one tensor's noise.
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "autograd/saved_tensor_store.h"
#include "quant/store/compressing_store.h"
#include "quant/group/group_quant.h"
#include "quant/policy/scheme_options.h"

namespace packrat {

struct GroupStoreOptions {
  GroupQuantConfig quant;  // default bits, group size, grouping, metadata, rounding
  uint64_t seed = 0;
};

// What the store learnt about one quantized tensor in the current step (for GACT).
struct QuantizedTensorInfo {
  int64_t index = 0;    // order of quantization within the step
  std::string layer, op;
  Need need = Need::Value;
  int64_t numel = 0, samples = 1;
  int bits = 0;
  int64_t bytes = 0;                    // codes + metadata
  std::vector<double> sample_range_sq;  // (samples,) sum over the sample's elements of range^2/4 of their group
};

// Chooses the bits of each quantized tensor (GACT). Called at save time.
class BitsProvider {
 public:
  virtual ~BitsProvider() = default;
  virtual int bits_for(int64_t index, const SaveRequest& r, const Tensor& x) = 0;
  // Whether the store sums each tensor's group ranges per sample (QuantizedTensorInfo's
  // sample_range_sq, a pass over every group of every tensor a step) for the provider to read.
  virtual bool wants_ranges() const { return true; }
};

class GroupStore : public CompressingStore {
 public:
  explicit GroupStore(GroupStoreOptions o = {});
  // Options: bits {1,2,3,4,8} (2), group_size >= 1 (256), grouping per_sample|per_plane|flat
  // (per_sample; quant/group/group_quant.h), meta bf16|f32 (bf16), rounding stochastic|nearest (stochastic), seed (0);
  // `base` supplies the defaults (a preset).
  static GroupStoreOptions parse_options(SchemeOptions& o, const GroupStoreOptions& base = {});

  std::string_view scheme() const override { return provider_ ? "gact" : "actnn"; }
  void begin_step(int64_t step) override;

  // GACT: bits per tensor come from the provider (null: the configured bits).
  void set_bits_provider(BitsProvider* p) { provider_ = p; }
  // Re-draws the noise of the tensor with this index (salt != 0) while all others stay fixed;
  // salt 0 restores the normal noise.
  void set_noise_salt(int64_t index, uint64_t salt);
  void clear_noise_salts() { salts_.clear(); }
  // Takes the next tensor index without quantizing (a tensor GACT holds exact for one measurement
  // pass), so that the tensors after it keep their noise. step_tensors() then skips that index.
  void skip_index() { ++next_index_; }
  // Tensors quantized since begin_step, by index.
  const std::vector<QuantizedTensorInfo>& step_tensors() const { return step_tensors_; }

  const GroupStoreOptions& options() const { return opts_; }
  int64_t step() const { return step_; }

 protected:
  // The codec: per-group codes + metadata (quant/group/group_quant.h) of an f32 Value or Derivative.
  std::unique_ptr<Encoded> encode(const Tensor& x, const SaveRequest& r) override;
  // x dequantized (a Workspace tensor); the base's decode and apply_encoded take f' of it.
  Tensor values(const Encoded& enc, const Entry& e) override;
  // Dequantized straight into bf16 on the CPU (no f32 copy of x), as f32 then converted elsewhere.
  Tensor values_in(const Encoded& enc, const Entry& e, DType dtype) override;
  // bf16 is quantized as it lies on the CPU; other 16-bit inputs through an f32 copy (quantize_groups).
  bool encodes_16bit() const override { return true; }
  // On a GPU, grad * f'(x) straight from the codes in one pass (dequantize_groups_apply), no
  // Workspace tensor of x; on the CPU, and for codes of a plain copy, the base's two passes.
  Tensor apply_encoded(const Encoded& enc, const Entry& e, const Tensor& grad_out) override;
  bool codec_on_devices() const override { return true; }  // quant/group/group_quant.h's entry points

 private:
  struct Quantized;  // the Encoded of one tensor
  uint64_t noise_seed(int64_t index) const;

  GroupStoreOptions opts_;
  BitsProvider* provider_ = nullptr;
  int64_t step_ = 0, next_index_ = 0;
  std::map<int64_t, uint64_t> salts_;
  std::vector<QuantizedTensorInfo> step_tensors_;
};

// Factory for the config (`{scheme: actnn, bits: 2, group_size: 256}`); calls o.check_all_used().
std::unique_ptr<SavedTensorStore> make_group_store(SchemeOptions& o);

// ActNN-style analytic estimate, per op kind, of ||d(param grad)/d x_j||^2 / ||grad_out_n||^2
// for an input element x_j of sample n (grad_out: the consumer's output gradient):
//   linear, matmul: 1 / (rows of grad_out per sample)   (exact: x_j meets one row of grad_out)
//   otherwise:      1 / (grad_out elements per sample)   (elementwise and normalisation ops;
//                   conv2d's kernel-aware factor is analytic_jacobian_factor in gact_store.h)
double jacobian_factor(std::string_view op, const Tensor& grad_out);

// Per-sample squared L2 norms of a tensor whose leading dimension is the batch (any layout:
// a sample is contiguous in both). A tensor of rank < 2 is one sample.
std::vector<double> per_sample_sq_norms(const Tensor& t);

}  // namespace packrat
