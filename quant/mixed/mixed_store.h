#pragma once
// The mixed-precision store (scheme "mixed") and its deterministic baseline (scheme
// "deterministic"): saved activations quantized per bucket (quant/mixed/mixed_quant.h), each bucket at
// the base or the mix width drawn with probability mix_prob, which may follow a schedule over
// training; the deterministic scheme is round-to-nearest at one width, 1 to 16 bits (the
// thesis's Brevitas baseline), so stochastic and deterministic runs compare at matched bits.
//
// The store contract (autograd/saved_tensor_store.h):
//   Value, Derivative   quantized; for a Derivative of an fn with derivative_from_output the
//                       tensor handed over is y = f(x) and load returns f'(x) read off the
//                       dequantized y, otherwise f'(dequantized x). A step derivative (relu
//                       family) is kept as its exact 1-bit mask instead, as the per-group store
//                       does: quantizing y would flip the mask of small outputs at random.
//   exact requests      kept in f32 by an inner FP32 store (a reference, tagged Saved while held),
//                       as are non-f32 values
//   Mask                exact, 1 bit per element (u8/i32/i64 0/1 in, the same dtype out)
//   Index               packed at index_bits (1..16); kept exactly when a value does not fit
// Buckets are contiguous in the tensor's logical (plain NCHW) order, as the thesis cuts the
// activation, in every layout, so that a tensor gets the same codes on the CPU and on a GPU: the
// CPU kernels walk a blocked buffer (nChw16c or nChw8c, its convolutions') in plain order; a GPU's NHWC
// tensor is quantized from a transient plain copy and decoded into one, then reordered (Workspace
// both). The one-pass backward from the codes (apply_encoded) is kept for plain tensors.
// A buffer saved twice (same storage and version, same form) is held once and counted once
// (the bookkeeping is quant/store/compressing_store.h's).
// Every byte held is a packrat Tensor allocated under TagScope(MemTag::Saved).
//
// Modes: save_quantized quantizes at save (the memory-saving mode); quantize_on_backward keeps
// the f32 tensor until backward loads it and quantizes then, with the same random keys, so it
// loads exactly what save_quantized would (the thesis's ablation mode; it saves nothing).
// Masks and indices are exact either way and are packed in both modes.
//
// Randomness: Philox keyed by (seed, step, index of the save within the step), as the per-group
// store's; begin_step(step) sets the step. Progress through training (for the mix_prob schedule)
// comes from set_progress(fraction), which the trainer calls before every step with
// step / (epochs x steps per epoch), or from begin_step when total_steps is configured (which
// then takes precedence).
//
// Config examples (the rule policy matches layer-name patterns, so one stage at a time can be
// quantized, the thesis's layer-wise study):
//   default: {scheme: mixed, preset: "2/4@0.5", bucket_size: 512}
//   rules:   - {layers: ["layer3.*"], scheme: deterministic, bits: 2, bucket_size: 128}
#include <cstdint>
#include <memory>
#include <string>

#include "autograd/saved_tensor_store.h"
#include "quant/store/compressing_store.h"
#include "quant/mixed/mixed_presets.h"
#include "quant/mixed/mixed_quant.h"
#include "quant/policy/scheme_options.h"

namespace packrat {

enum class StorageMode : uint8_t { SaveQuantized, QuantizeOnBackward };
std::string_view storage_mode_name(StorageMode m);

struct MixedStoreOptions {
  std::string scheme = "mixed";  // "mixed" or "deterministic": the name in reports
  MixedQuantConfig quant;        // quant.mix_prob is replaced by the schedule's value at each save
  MixSchedule schedule;
  int64_t total_steps = 0;       // > 0: begin_step(s) sets progress s / total_steps
  StorageMode mode = StorageMode::SaveQuantized;
  uint64_t seed = 0;
  std::string label;             // "2/4@0.5", for reports
  void check(std::string_view where) const;
};

// Totals over the tensors quantized since construction or reset_stats().
struct MixedStoreStats {
  int64_t tensors = 0, elements = 0, buckets = 0, mix_buckets = 0;
  int64_t code_bytes = 0, bytes = 0;  // codes alone; everything held (metadata and flags too)
  double mix_fraction() const { return buckets ? static_cast<double>(mix_buckets) / static_cast<double>(buckets) : 0.0; }
  double code_bits() const { return elements ? 8.0 * static_cast<double>(code_bytes) / static_cast<double>(elements) : 0.0; }
  double bits() const { return elements ? 8.0 * static_cast<double>(bytes) / static_cast<double>(elements) : 0.0; }
};

class MixedStore : public CompressingStore {
 public:
  explicit MixedStore(MixedStoreOptions o);
  std::string_view scheme() const override { return options_.scheme; }
  void begin_step(int64_t step) override;

  // Fraction of training done, in [0, 1], for the mix_prob schedule (the trainer calls it,
  // e.g. epoch / epochs at each epoch start, or step / total steps).
  void set_progress(double fraction);
  double progress() const;
  double current_mix_prob() const;  // the schedule at the current progress

  MixedStoreStats stats() const;
  void reset_stats();
  // One line for logs: "mixed 2/4@0.5 affine bucket 512: 3.06 bits/element held (codes 3.00), 50.1% mix buckets".
  std::string summary() const;
  const MixedStoreOptions& options() const { return options_; }

 protected:
  // The codec: per-bucket codes (quant/mixed/mixed_quant.h) of an f32 Value or Derivative, or under
  // quantize_on_backward the f32 tensor itself, quantized when loaded.
  std::unique_ptr<Encoded> encode(const Tensor& x, const SaveRequest& r) override;
  bool encodes_16bit() const override { return true; }  // bf16 on the CPU as it lies, else an f32 copy
  // x dequantized (a Workspace tensor); the base's decode and apply_encoded take f' of it.
  Tensor values(const Encoded& enc, const Entry& e) override;
  Tensor values_in(const Encoded& enc, const Entry& e, DType dtype) override;
  // On a GPU, grad * f'(x) straight from the codes in one pass (dequantize_mixed_apply), no
  // Workspace tensor of x, for a plain tensor; on the CPU, and for other layouts, the base's two passes.
  Tensor apply_encoded(const Encoded& enc, const Entry& e, const Tensor& grad_out) override;
  bool codec_on_devices() const override { return true; }  // quant/mixed/mixed_quant.h's entry points

 private:
  struct Quantized;  // the Encoded of one tensor
  void count(const MixedPacked& p);

  MixedStoreOptions options_;
  int64_t step_ = 0;
  uint64_t tensor_index_ = 0;  // saves since begin_step: the Philox stream's tensor part
  double progress_ = 0.0;
  MixedStoreStats stats_;
};

// Sets the training progress (fraction in [0, 1]) of every mixed store of a policy, e.g. at each
// epoch start: set_training_progress(policy, double(epoch) / epochs). Other stores ignore it.
void set_training_progress(StorePolicy& policy, double fraction);

// Config factories. "mixed" keys: preset ("2/4@0.5", "2/6@0.3", "3/6@0.4", "4/8@0.2", the
// thesis's "2bit_4bit_mix" names, or any "A/B@p") or base_bits (2) / mix_bits (4) / mix_prob
// (0.5); base_levels / mix_levels instead of bits for the sign-magnitude rules; mix_prob_end and
// schedule (constant|linear|cosine; linear when mix_prob_end is given); total_steps; decision
// (per_bucket|per_tensor); bucket_size (512); scale (affine|maxabs|l2); meta (bf16|f32); rounding
// (stochastic|nearest); mode (save_quantized|quantize_on_backward); seed.
std::unique_ptr<SavedTensorStore> make_mixed_store(SchemeOptions& o);
// "deterministic" keys: bits (1..16, default 4), bucket_size (512), scale (affine|maxabs|l2),
// meta (bf16|f32), mode.
std::unique_ptr<SavedTensorStore> make_deterministic_store(SchemeOptions& o);

}  // namespace packrat
