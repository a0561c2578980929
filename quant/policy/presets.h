#pragma once
// Storage presets named after ActNN's and GACT's optimisation levels, prefixed with the system
// so that no name means two things (the two systems number their levels differently, and GACT's
// paper and its released code disagree with each other). Each is registered with the rule
// policy's scheme registry like any built-in scheme: `default: {scheme: actnn-L3}`; keys written
// next to a preset override its values (`{scheme: gact-L1, adapt_interval: 200}`).
//
//   name          keeps                                            source
//   actnn-L0      everything in FP32                               ActNN conf.py L0
//   actnn-L1      4-bit per-group, batchnorm inputs in FP32        ActNN L1 "4-bit conv + 32-bit bn"
//   actnn-L2      4-bit per-group everywhere                       ActNN L2
//   actnn-L3      adaptive bits, 2 per element on average, from    ActNN L3 (ActNN adapts per sample
//                 ActNN's analytic sensitivity, re-allocated at    and layer; packrat per tensor)
//                 every step
//   gact-L0       everything in FP32                               GACT paper Table 1 L0
//   gact-L1       adaptive bits, 4 on average (measured, GACT)     GACT paper L1 (released code: L2)
//   gact-L2       gact-L1's storage, every saved tensor offloaded  GACT paper L2 (L1 + swapping and
//                 to host memory (memory.offload: {} unless the    prefetching)
//                 config gives one)
//   actnn-L4      actnn-L3's storage, offloaded the same way       ActNN L4 (L3 + swapping)
//   gact-adapt3   adaptive bits, 3 on average                      GACT "Adapt 3bit" (code: L2.1)
//   gact-adapt2   adaptive bits, 2 on average                      GACT "Adapt 2bit" (code: L2.2)
//   gact-fix4     4-bit per-group everywhere                       GACT "Fix 4bit" (code: L1)
//   gact-CB1      gact-L1's storage at most 8 bits a tensor        GACT paper CB1 (L1 + gradient
//                 (max_bits), and every residual / transformer     checkpointing)
//                 block recomputed (memory.recompute: [blocks]
//                 unless the config names modules)
//   gact-CB2      gact-CB1 with memory-efficient attention         GACT paper CB2 (CB1 + memory-
//                 (model.attention: memory_efficient unless the    efficient self-attention)
//                 config names an algorithm)
//
// The level that adds defragmentation of the CUDA allocator (ActNN L5) packrat does not do: its
// name is known, and choosing it is an error that says so and names the preset with the same
// storage. Offloading presets need a device with a second memory (a GPU): on the CPU they are an
// error naming them (experiments/lib/session.cpp).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/saved_tensor_store.h"
#include "quant/policy/scheme_options.h"

namespace packrat {

struct StoragePreset {
  std::string name;    // "actnn-L3"
  std::string scheme;  // the scheme it configures: "fp32", "actnn" or "gact"; "" when unavailable
  std::map<std::string, std::string> options;  // the preset's values, e.g. {avg_bits: 2}
  bool fp32_batchnorm = false;  // batchnorm2d's saved inputs kept in FP32 (ActNN L1)
  std::string summary;          // what it keeps, or (unavailable) what the level adds that packrat lacks
  std::string source;           // the level it reproduces
  bool recompute_blocks = false;  // the level recomputes every block (memory.recompute: [blocks])
  bool memory_efficient_attention = false;  // ... and uses memory-efficient attention (model.attention)
  bool offload = false;  // the level moves saved tensors to host memory (memory.offload: {})
};
const std::vector<StoragePreset>& storage_presets();
const StoragePreset* find_storage_preset(const std::string& name);  // null when not a preset
// Whether a scheme name is a preset that recomputes every block (gact-CB1).
bool preset_recomputes_blocks(const std::string& scheme);
// Whether it is a preset that offloads saved tensors to host memory (gact-L2, actnn-L4).
bool preset_offloads(const std::string& scheme);
// Whether it is a preset with memory-efficient attention (gact-CB2).
bool preset_uses_memory_efficient_attention(const std::string& scheme);

// Builds the store of a preset; options as written override the preset's. Calls
// o.check_all_used(). Throws naming o.where() for an unknown or unavailable preset.
std::unique_ptr<SavedTensorStore> make_preset_store(const std::string& name, SchemeOptions& o);

// Routes batchnorm2d's saves to an FP32 store and everything else to `inner` (ActNN L1).
// Handles belong to the store that made them, so load and release go there directly.
class Fp32BatchnormStore : public SavedTensorStore {
 public:
  explicit Fp32BatchnormStore(std::unique_ptr<SavedTensorStore> inner);
  std::string_view scheme() const override { return inner_->scheme(); }
  SavedHandle save(const Tensor& x, const SaveRequest& r) override;
  std::pair<Tensor, SavedHandle> forward_and_save(const Tensor& x, const SaveRequest& r) override;
  Tensor load(const SavedHandle& h) override { return h.store->load(h); }
  void release(const SavedHandle& h) override { h.store->release(h); }
  void describe(std::vector<SavedRecord>& out) const override;
  size_t live_count() const override;
  void begin_step(int64_t step) override;
  SavedTensorStore& inner() { return *inner_; }

 private:
  SavedTensorStore& route(const SaveRequest& r);
  std::unique_ptr<SavedTensorStore> inner_;
  std::unique_ptr<SavedTensorStore> fp32_;
};

}  // namespace packrat
