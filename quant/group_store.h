#pragma once
// The per-group store (ActNN; GACT when a bit-width provider drives it): Value and Derivative
// requests are quantized per group to b bits (quant/group_quant.h) and backward gets the
// dequantized value, or f' of it; the derivative of a step function (relu family) is kept as an
// exact 1-bit mask instead; masks are packed exactly to 1 bit, indices to r.index_bits bits, and
// exact requests (and non-f32 data) stay FP32. A tensor saved by two ops
// is quantized once. Packed codes and metadata are u8 tensors allocated under the Saved tag,
// so the allocator counts every byte and describe() reports exactly those.
//
// Randomness: the tensor quantized n-th since begin_step(step) draws its rounding noise from
// Philox(seed, quant_stream(step, n), element); set_noise_salt re-draws one tensor's noise.
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "autograd/fp32_store.h"
#include "autograd/saved_tensor_store.h"
#include "quant/group_quant.h"
#include "quant/scheme_options.h"

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
  // (samples,) ||grad_out_n||^2 of the consumer times jacobian_factor: the squared norm of a
  // parameter-gradient Jacobian column per input element of sample n; empty until observed.
  std::vector<double> sample_grad_sq;
};

// Chooses the bits of each quantized tensor (GACT). Called at save time.
class BitsProvider {
 public:
  virtual ~BitsProvider() = default;
  virtual int bits_for(int64_t index, const SaveRequest& r, const Tensor& x) = 0;
};

class GroupStore : public SavedTensorStore {
 public:
  explicit GroupStore(GroupStoreOptions o = {});
  // Options: bits {1,2,3,4,8} (2), group_size >= 1 (256), grouping per_sample|flat
  // (per_sample), meta bf16|f32 (bf16), rounding stochastic|nearest (stochastic), seed (0);
  // `base` supplies the defaults (a preset).
  static GroupStoreOptions parse_options(SchemeOptions& o, const GroupStoreOptions& base = {});

  std::string_view scheme() const override { return provider_ ? "gact" : "actnn"; }
  SavedHandle save(const Tensor& x, const SaveRequest& r) override;
  Tensor load(const SavedHandle& h) override;
  void release(const SavedHandle& h) override;
  void describe(std::vector<SavedRecord>& out) const override;
  size_t live_count() const override { return entries_.size() + exact_.live_count(); }
  void begin_step(int64_t step) override;

  // Records the per-sample ||grad_out||^2 of the op that consumes handle h in the tensor's
  // QuantizedTensorInfo (for ActNN's analytic estimator; GactStore calls it from note_backward).
  void note_grad_output(const SavedHandle& h, const Tensor& grad_out);

  // GACT: bits per tensor come from the provider (null: the configured bits).
  void set_bits_provider(BitsProvider* p) { provider_ = p; }
  // Re-draws the noise of the tensor with this index (salt != 0) while all others stay fixed;
  // salt 0 restores the normal noise.
  void set_noise_salt(int64_t index, uint64_t salt);
  void clear_noise_salts() { salts_.clear(); }
  // Tensors quantized since begin_step, by index.
  const std::vector<QuantizedTensorInfo>& step_tensors() const { return step_tensors_; }

  const GroupStoreOptions& options() const { return opts_; }
  int64_t step() const { return step_; }

 private:
  // How a buffer is held; a tensor saved twice in the same form is held once.
  enum class Form : uint8_t { Quantized, Packed, StepMask };
  struct Key {
    const Storage* storage;
    Form form;
    const Pointwise* fn;
    auto operator<=>(const Key&) const = default;
  };
  struct Held {  // one quantized (or packed) buffer, however many handles refer to it
    Form form = Form::Quantized;  // per-group codes + metadata; exact codes at `bits`; or
                                  // a step derivative's 1-bit mask (f' = hi where set, lo elsewhere)
    int bits = 0;
    float lo = 0, hi = 0;
    const Pointwise* fn = nullptr;  // StepMask: the function
    Tensor codes, meta;     // u8 (code bytes,), u8 (meta bytes,) or undefined when packed exactly
    GroupGeometry geometry;
    int64_t index = -1;  // position in step_tensors_ (quantized tensors only), -1 otherwise
    int64_t step = 0;
    Key key{};
    std::weak_ptr<Storage> source;
    int64_t version = 0;
    int refs = 0;
  };
  struct Entry {
    uint64_t held;
    SaveRequest request;
    Shape shape;
    DType dtype;
    Layout layout;
    bool shared;
    uint64_t fp32_key;  // storage id of the tensor handed to save(): what FP32 would hold
  };
  uint64_t quantize(const Tensor& x, const SaveRequest& r);
  uint64_t pack_exact_bits(const Tensor& x, const SaveRequest& r, int bits);
  uint64_t pack_step_derivative(const Tensor& x, const SaveRequest& r);
  uint64_t find_held(const Key& k, const Tensor& x) const;
  uint64_t noise_seed(int64_t index) const;

  GroupStoreOptions opts_;
  BitsProvider* provider_ = nullptr;
  Fp32Store exact_;  // r.exact requests
  std::map<uint64_t, Held> held_;
  std::map<Key, uint64_t> by_key_;  // latest held buffer per (storage, form)
  std::map<uint64_t, Entry> entries_;                        // by handle id: the order of saving
  uint64_t next_id_ = 1, next_held_ = 1;
  int64_t step_ = 0, next_index_ = 0;
  std::map<int64_t, uint64_t> salts_;
  std::vector<QuantizedTensorInfo> step_tensors_;
};

// Factory for the config (`{scheme: actnn, bits: 2, group_size: 256}`); calls o.check_all_used().
std::unique_ptr<SavedTensorStore> make_group_store(SchemeOptions& o);

// ActNN-style analytic estimate, per op kind, of ||d(param grad)/d x_j||^2 / ||grad_out_n||^2
// for an input element x_j of sample n (grad_out: the consumer's output gradient):
//   linear, matmul: 1 / (rows of grad_out per sample)   (exact: x_j meets one row of grad_out)
//   conv2d:         9 / (OH * OW)                        (a 3x3 kernel's fan-out; an estimate)
//   otherwise:      1 / (grad_out elements per sample)   (elementwise and normalisation ops)
double jacobian_factor(std::string_view op, const Tensor& grad_out);

// Per-sample squared L2 norms of a tensor whose leading dimension is the batch (any layout:
// a sample is contiguous in both). A tensor of rank < 2 is one sample.
std::vector<double> per_sample_sq_norms(const Tensor& t);

}  // namespace packrat
