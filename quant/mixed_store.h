#pragma once
// The mixed-precision store (scheme "mixed") and its deterministic baseline (scheme
// "deterministic"): saved activations quantized per bucket (quant/mixed_quant.h), each bucket at
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
// A buffer saved twice (same storage and version, same form) is held once and counted once.
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
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "autograd/fp32_store.h"
#include "autograd/saved_tensor_store.h"
#include "quant/mixed_presets.h"
#include "quant/mixed_quant.h"
#include "quant/scheme_options.h"

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

class MixedStore : public SavedTensorStore {
 public:
  explicit MixedStore(MixedStoreOptions o);
  std::string_view scheme() const override { return options_.scheme; }

  SavedHandle save(const Tensor& x, const SaveRequest& r) override;
  Tensor load(const SavedHandle& h) override;
  void release(const SavedHandle& h) override;
  void describe(std::vector<SavedRecord>& out) const override;
  size_t live_count() const override;
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

 private:
  // How a buffer is held; a tensor saved twice in the same form is held once.
  enum class Form : uint8_t { Quantized, StepMask, Packed };
  struct Key {
    const Storage* storage;
    Form form;
    const Pointwise* fn;  // StepMask: the function
    int bits;             // Packed: the code bits
    auto operator<=>(const Key&) const = default;
  };
  struct Held {  // one kept form of one buffer, however many handles refer to it
    Key key{};
    std::weak_ptr<Storage> source;  // the buffer saved: keeps its address unique while held; in-place checks
    int64_t version = 0;
    int64_t numel = 0;
    MixedPacked packed;        // Quantized under save_quantized
    Tensor reference;          // Quantized under quantize_on_backward: the f32 tensor itself, tagged Saved
    MemTag original_tag = MemTag::Activation;
    Tensor bits;               // StepMask, Packed: (packed_bytes(numel, bits),) u8 (mixed_quant's wide layout above 8 bits)
    float lo = 0, hi = 0;      // StepMask: f' where the bit is 0 / 1
    MixedQuantConfig quant;    // as drawn at save (mix_prob included)
    QuantNoise noise;
    int refs = 0;
    int64_t bytes() const;
    double bits_per_element() const;  // what the report shows: everything held over the elements
  };
  struct Entry {
    uint64_t held = 0;
    SaveRequest request;
    Shape shape;
    DType dtype = DType::f32;
    Layout layout = Layout::Plain;
    bool shared = false;  // not the first handle to its held data
    SavedHandle exact;    // valid: kept by exact_ (held is 0)
    uint64_t fp32_key = 0;  // storage id of the tensor handed to save(): what FP32 would hold
  };

  uint64_t find_held(const Key& k, const Tensor& x) const;
  uint64_t keep(Held h, const Tensor& x);
  void quantize(Held& h, const Tensor& x);
  Tensor dequantized(const Held& h, const Entry& e);  // counts a quantize_on_backward quantization
  void count(const MixedPacked& p);

  MixedStoreOptions options_;
  mutable std::mutex mutex_;
  Fp32Store exact_;  // exact requests, non-f32 values, indices their bits cannot hold
  std::map<uint64_t, Held> held_;
  std::map<Key, uint64_t> by_key_;  // latest held buffer per key
  std::map<uint64_t, Entry> entries_;  // by id: the order of saving
  uint64_t next_id_ = 1, next_held_ = 1;
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
