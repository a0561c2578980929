#pragma once
// The saved-tensor contract: every tensor an op keeps for backward goes through a store.
// Ops say what backward needs; the store decides how to keep it (FP32, few-bit LUT index,
// per-group quantized, ...) and hands back what was asked for in backward.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/pointwise.h"
#include "core/tensor.h"

namespace packrat {

enum class Need : uint8_t {
  Value,       // x itself (conv/linear inputs, normalized inputs, softmax outputs)
  Derivative,  // f'(x) of a pointwise op; `fn` says which
  Mask,        // a boolean tensor (u8 0/1), e.g. relu's x > 0 or dropout's keep mask
  Index,       // small integers, e.g. max-pool's argmax within the window (i32/u8)
};
std::string_view need_name(Need n);

struct SaveRequest {
  Need need = Need::Value;
  const Pointwise* fn = nullptr;  // for Need::Derivative
  std::string_view op;            // "conv2d", "gelu", ...
  std::string name;               // the layer, e.g. "layer1.0.conv1"
  int64_t index_bits = 0;         // for Need::Index: bits the largest index needs
  // Small tensors that every store must keep exactly (batchnorm/layernorm statistics,
  // cross-entropy probabilities): compressing stores pass them to full precision.
  bool exact = false;
};

class SavedTensorStore;
class Offloader;

// One buffer a store keeps for a handle, for the offload layer (autograd/offload/): the Tensor the
// store holds, which the layer replaces with a host copy after the save and with a device copy
// before the store reads it again (load, apply_derivative). A store reads a payload only there;
// describe() may read its allocation's bytes wherever it lies.
struct PayloadSlot {
  Tensor* tensor = nullptr;
  // The tag its device buffer goes back to when the store lets go of it while something else still
  // holds it: the forward's own tensor, which the FP32 store keeps by reference (its tag before the
  // save: Activation, Data); Saved for a store's own codes, which nothing else holds.
  MemTag tag_left = MemTag::Saved;
};

// What an op keeps in its Node; the store owns the data behind it.
struct SavedHandle {
  SavedTensorStore* store = nullptr;
  uint64_t id = 0;
  bool valid() const { return store != nullptr; }
};

// One live saved tensor, for the memory report. `bytes` come from the allocator.
struct SavedRecord {
  std::string layer, op, scheme;
  Need need = Need::Value;
  double bits = 32;          // bits per element as held (realised average where mixed)
  int64_t bytes = 0;         // bytes really held, metadata and padding included
  int64_t fp32_bytes = 0;    // what the FP32 store would hold for it (16-bit under autocast: the AMP baseline)
  int64_t f32_bytes = 0;     // ... in a run without autocast (a 16-bit tensor at 4 bytes an element)
  int64_t numel = 0;
  Shape shape;               // of the tensor saved (x, or y where fn->derivative_from_output)
  DType dtype = DType::f32;  // ... and its element type
  bool shared = false;       // a second save of a tensor already held: counted once
  // Kept without loss by a compressing scheme: a step function's derivative as its 1-bit mask,
  // a mask, an index (packed to the bits it needs).
  bool exact = false;
  // A small tensor every store keeps in full (SaveRequest::exact): batchnorm's mean and variance,
  // the loss's probabilities.
  bool statistics = false;
  // Storage id of the tensor the FP32 store would hold for this request (x, or y where
  // fn->derivative_from_output): records with the same key count their fp32_bytes once,
  // as the FP32 store keeps a buffer saved by two ops once (relu's output, which the next
  // conv saves too). 0: unknown, always counted.
  uint64_t fp32_key = 0;
};

class SavedTensorStore {
 public:
  virtual ~SavedTensorStore() = default;
  virtual std::string_view scheme() const = 0;
  // Whether this store serves the request (e.g. the few-bit store serves only Derivative and
  // Mask requests); the policy falls back to its default store otherwise.
  virtual bool accepts(const SaveRequest& r) const { return true; }

  virtual SavedHandle save(const Tensor& x, const SaveRequest& r) = 0;
  virtual Tensor load(const SavedHandle& h) = 0;  // what r.need asked for
  // load(h) in the dtype a kernel computes in (a 16-bit convolution's or matmul's input under
  // autocast): a store that decodes may write that dtype directly, with the values load(h).to(dtype)
  // gives. Default: exactly that.
  virtual Tensor load_in(const SavedHandle& h, DType dtype);
  virtual void release(const SavedHandle& h) = 0;

  // Pointwise forward + save in one call, so a store can compute f(x) and its compressed form
  // in one pass. Default: y = f(x), then save(x), or save(y) where fn->derivative_from_output
  // is set (as PyTorch does); a store that is handed y computes f' with derivative_from_output.
  virtual std::pair<Tensor, SavedHandle> forward_and_save(const Tensor& x, const SaveRequest& r);
  // grad_in = grad_out * load(h) for Need::Derivative and Need::Mask; stores may fuse it.
  virtual Tensor apply_derivative(const SavedHandle& h, const Tensor& grad_out);

  // The buffers kept for a live handle (codes, metadata, masks; the tensor itself where nothing
  // compresses), for the offload layer; a buffer shared by two handles is listed for both, and an
  // undefined Tensor listed is skipped. Default:
  // none (what the store keeps stays on the device).
  virtual void payload(const SavedHandle& h, std::vector<PayloadSlot>& out) {
    (void)h;
    (void)out;
  }
  // The backward is about to reach the node holding h, `distance` nodes before it runs (0: next):
  // a store that keeps h elsewhere (the offload layer) starts bringing it back. Default: nothing.
  virtual void prefetch(const SavedHandle& h, int distance) {
    (void)h;
    (void)distance;
  }

  // Appends one record per live saved tensor.
  virtual void describe(std::vector<SavedRecord>& out) const = 0;
  virtual size_t live_count() const = 0;

  // Training step, for stores whose randomness is keyed by it.
  virtual void begin_step(int64_t step) { (void)step; }
  // The tape is about to run the backward of the node holding h, with these output gradients:
  // lets a store learn from the backward signal (e.g. ActNN's analytic sensitivity needs each
  // consumer's output-gradient norm per sample). Default: nothing.
  virtual void note_backward(const SavedHandle& h, const std::vector<Tensor>& grad_outputs) {
    (void)h;
    (void)grad_outputs;
  }

  // ---- a store that adapts across steps (GACT's bit allocation: quant/group/gact_store.h). The
  // trainer calls these on every store of its policy; the defaults do nothing.
  // Evaluates the parameter gradients on the step's batch with the current policy, leaving the
  // model as it was; returns copies of them.
  using GradFn = std::function<std::vector<Tensor>()>;
  // Once, before the first step: the model's named parameters ("layer1.0.conv1.weight"), for
  // what a store needs to know of the model (GACT: every convolution's kernel size).
  virtual void observe_model(const std::vector<std::pair<std::string, Tensor>>& named_parameters) {
    (void)named_parameters;
  }
  // Before a step's forward: re-estimates what it adapts, when due, calling `param_grads` as it
  // needs. Returns true when its state changed (data-parallel ranks then take rank 0's state).
  virtual bool refresh(int64_t step, const GradFn& param_grads) {
    (void)step;
    (void)param_grads;
    return false;
  }
  // After a step's backward: the parameter gradients (undefined where a parameter has none).
  virtual void observe_gradients(const std::vector<Tensor>& grads) { (void)grads; }
  // The state a checkpoint keeps (and data-parallel ranks share): its name ("gact"; empty: the
  // store keeps none) and its entries as named host tensors.
  virtual std::string_view state_name() const { return {}; }
  virtual std::vector<std::pair<std::string, Tensor>> export_state() const { return {}; }
  // Replaces the state by an export_state() result; `where` starts every error, and an error
  // about an entry names it as `entry_prefix` + its name (a checkpoint's "gact.0.bits").
  virtual void import_state(const std::vector<std::pair<std::string, Tensor>>& state, const std::string& where,
                            const std::string& entry_prefix = "") {
    (void)state;
    (void)where;
    (void)entry_prefix;
  }
  // Where it logs what it adapts, in a run directory ("": not at all, e.g. on all ranks but
  // rank 0); `index` is its place among the stores of its state name (GACT: gact_bits.csv, then
  // gact_bits_1.csv, ..., unless its options name a file).
  virtual void log_to(const std::string& run_dir, int index) {
    (void)run_dir;
    (void)index;
  }
  // After the backward of the first step that follows import_state (a recomputed segment saves
  // during the backward): throws naming the first difference when the restored state does not
  // belong to what this step saved. Default: nothing to check.
  virtual void check_restored_step() {}
};

// Maps each request to a store. Built from the `saved_tensors` config section.
class StorePolicy {
 public:
  virtual ~StorePolicy() = default;
  virtual SavedTensorStore& store_for(const SaveRequest& r) = 0;
  virtual std::vector<SavedTensorStore*> stores() = 0;
  virtual void begin_step(int64_t step) {
    for (auto* s : stores()) s->begin_step(step);
  }
  // The offload layer under its stores (autograd/offload/), or null when nothing is offloaded.
  virtual Offloader* offloader() { return nullptr; }
  // Every live record of every store; fp32_bytes counted once per fp32_key across stores, so
  // that totals compare against what the FP32 store would really hold.
  std::vector<SavedRecord> describe();
};

// The stores of p that keep state across steps (state_name() not empty), in p.stores() order.
std::vector<SavedTensorStore*> stateful_stores(StorePolicy& p);

// The thread's policy (an FP32 policy unless set); PolicyScope swaps it for a scope.
StorePolicy& current_policy();
class PolicyScope {
 public:
  explicit PolicyScope(StorePolicy& p);
  ~PolicyScope();

 private:
  StorePolicy* previous_;
};

// What ops call: route through the current policy. Parameters (allocation tagged Parameter,
// e.g. a conv weight) are the model's own memory, never compressed: they go to a thread-local
// pass-through FP32 store and do not appear in memory reports.
SavedHandle save_for_backward(const Tensor& x, const SaveRequest& r);

// Elementwise grad_out * d over the buffers as they lie (same layout), f32.
Tensor multiply_elementwise(const Tensor& grad_out, const Tensor& d);

}  // namespace packrat
