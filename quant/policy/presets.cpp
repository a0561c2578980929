#include "quant/policy/presets.h"

#include "autograd/fp32_store.h"
#include "core/error.h"
#include "quant/group/gact_store.h"
#include "quant/group/group_store.h"

namespace packrat {

const std::vector<StoragePreset>& storage_presets() {
  static const std::vector<StoragePreset> presets = {
      {"actnn-L0", "fp32", {}, false, "no compression: every saved tensor in FP32", "ActNN L0"},
      {"actnn-L1", "actnn", {{"bits", "4"}}, true, "4-bit per-group quantization; batchnorm inputs in FP32",
       "ActNN L1 (4-bit conv + 32-bit bn)"},
      {"actnn-L2", "actnn", {{"bits", "4"}}, false, "4-bit per-group quantization everywhere", "ActNN L2"},
      {"actnn-L3", "gact", {{"avg_bits", "2"}, {"estimator", "analytic"}, {"adapt_interval", "1"}}, false,
       "adaptive bits per tensor, 2 per element on average, from the analytic sensitivity, re-allocated every step",
       "ActNN L3 (2-bit with adaptive precision; ActNN adapts per sample and layer, packrat per tensor)"},
      {"actnn-L4", "gact", {{"avg_bits", "2"}, {"estimator", "analytic"}, {"adapt_interval", "1"}}, false,
       "actnn-L3's storage, and every saved tensor moved to host memory after the forward saves it and prefetched "
       "back for the backward (memory.offload: {} unless the config gives one)",
       "ActNN L4 (L3 + swapping; ActNN swaps without a side stream or prefetch)", false, false, true},
      {"actnn-L5", "", {}, false, "ActNN L4 plus defragmentation of the CUDA allocator", "ActNN L5"},
      {"gact-L0", "fp32", {}, false, "no compression: every saved tensor in FP32", "GACT L0"},
      {"gact-L1", "gact", {{"avg_bits", "4"}}, false,
       "adaptive bits per tensor, 4 per element on average, from the measured sensitivity",
       "GACT paper L1 (auto-precision 4; the released code's L2)"},
      {"gact-L2", "gact", {{"avg_bits", "4"}}, false,
       "gact-L1's storage, and every saved tensor moved to host memory after the forward saves it and prefetched "
       "back for the backward (memory.offload: {} unless the config gives one)",
       "GACT paper L2 (L1 + swapping and prefetching)", false, false, true},
      {"gact-CB1", "gact", {{"avg_bits", "4"}, {"max_bits", "8"}}, false,
       "gact-L1's storage at most 8 bits a tensor, and every residual / transformer block recomputed in backward "
       "(memory.recompute: [blocks] unless the config names modules)",
       "GACT paper CB1 (L1 + gradient checkpointing)", true},
      {"gact-CB2", "gact", {{"avg_bits", "4"}, {"max_bits", "8"}}, false,
       "gact-CB1 (gact-L1's storage at most 8 bits a tensor, every block recomputed) with memory-efficient "
       "self-attention (model.attention: memory_efficient unless the config names one)",
       "GACT paper CB2 (CB1 + memory-efficient self-attention after Rabe & Staats)", true, true},
      {"gact-adapt3", "gact", {{"avg_bits", "3"}}, false, "adaptive bits per tensor, 3 per element on average",
       "GACT Adapt 3bit (the released code's L2.1)"},
      {"gact-adapt2", "gact", {{"avg_bits", "2"}}, false, "adaptive bits per tensor, 2 per element on average",
       "GACT Adapt 2bit (the released code's L2.2)"},
      {"gact-fix4", "actnn", {{"bits", "4"}}, false, "4-bit per-group quantization everywhere",
       "GACT Fix 4bit (the released code's L1)"},
  };
  return presets;
}

const StoragePreset* find_storage_preset(const std::string& name) {
  for (const auto& p : storage_presets())
    if (p.name == name) return &p;
  return nullptr;
}

bool preset_recomputes_blocks(const std::string& scheme) {
  const StoragePreset* p = find_storage_preset(scheme);
  return p && p->recompute_blocks;
}

bool preset_offloads(const std::string& scheme) {
  const StoragePreset* p = find_storage_preset(scheme);
  return p && p->offload;
}

bool preset_uses_memory_efficient_attention(const std::string& scheme) {
  const StoragePreset* p = find_storage_preset(scheme);
  return p && p->memory_efficient_attention;
}

namespace {

// The available preset whose storage an unavailable one adds to (actnn-L4 -> actnn-L3).
std::string same_storage_as(const StoragePreset& p) {
  if (p.name.rfind("actnn-", 0) == 0) return "actnn-L3";
  return "gact-L1";
}

}  // namespace

std::unique_ptr<SavedTensorStore> make_preset_store(const std::string& name, SchemeOptions& o) {
  const StoragePreset* p = find_storage_preset(name);
  if (!p) {
    std::string list;
    for (const auto& q : storage_presets())
      if (!q.scheme.empty()) list += (list.empty() ? "" : ", ") + q.name;
    fail("{}: unknown preset '{}'; available: {}", o.where(), name, list);
  }
  PACKRAT_CHECK(!p->scheme.empty(),
                "{}: preset '{}' is {} ({}); packrat keeps saved tensors in memory and does none of that: use '{}', "
                "which stores them the same way", o.where(), p->name, p->summary, p->source, same_storage_as(*p));
  // The preset's values are the defaults; keys written in the config override them.
  SchemeOptions preset(p->options, o.where() + " (preset " + p->name + ")");
  std::unique_ptr<SavedTensorStore> store;
  if (p->scheme == "fp32") {
    store = std::make_unique<Fp32Store>();
  } else if (p->scheme == "actnn") {
    const GroupStoreOptions base = GroupStore::parse_options(preset);
    store = std::make_unique<GroupStore>(GroupStore::parse_options(o, base));
  } else {
    const GactOptions base = GactStore::parse_options(preset);
    store = std::make_unique<GactStore>(GactStore::parse_options(o, base));
  }
  o.check_all_used();
  if (p->fp32_batchnorm) return std::make_unique<Fp32BatchnormStore>(std::move(store));
  return store;
}

Fp32BatchnormStore::Fp32BatchnormStore(std::unique_ptr<SavedTensorStore> inner)
    : inner_(std::move(inner)), fp32_(std::make_unique<Fp32Store>()) {}

SavedTensorStore& Fp32BatchnormStore::route(const SaveRequest& r) {
  return r.op == "batchnorm2d" ? *fp32_ : *inner_;
}

SavedHandle Fp32BatchnormStore::save(const Tensor& x, const SaveRequest& r) { return route(r).save(x, r); }

std::pair<Tensor, SavedHandle> Fp32BatchnormStore::forward_and_save(const Tensor& x, const SaveRequest& r) {
  return route(r).forward_and_save(x, r);
}

void Fp32BatchnormStore::describe(std::vector<SavedRecord>& out) const {
  inner_->describe(out);
  fp32_->describe(out);
}

size_t Fp32BatchnormStore::live_count() const { return inner_->live_count() + fp32_->live_count(); }

void Fp32BatchnormStore::begin_step(int64_t step) {
  inner_->begin_step(step);
  fp32_->begin_step(step);
}

}  // namespace packrat
