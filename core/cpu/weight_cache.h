#pragma once
// Cache of weights reordered into a primitive's preferred (blocked) format. Weights stay plain
// OIHW (PyTorch layout, for checkpoints); a convolution asks for them in, e.g., OIhw16i16o.
// Entries are kept by the weight's storage (Storage::derived), keyed by its in-place version and
// the wanted format, so an optimizer step (which bumps the version) invalidates them, and they
// are freed with the weight. The copies are allocator-accounted under the Workspace tag.
//
// What is kept: only model parameters (allocation tagged Parameter: their one writer, the
// optimizer, bumps the version) and only when the caller says the weight will be reused as is
// (`keep`: eval/inference, or a frozen weight). A training step changes every weight, so
// keeping its copies would only hold memory; such calls reorder, and free any stale entry.
// Code that writes into a parameter's data directly must call bump_version() (or
// clear_weight_cache()).
#include <cstdint>

#include "core/cpu/dnnl_context.h"

namespace packrat::cpu {

// `w` laid out as `want`: `w` itself when `want` equals `plain` (how w lies), else a reordered
// copy (1-d f32 buffer), from the cache when the weight has not changed since it was kept.
Tensor weights_as(const Tensor& w, const dnnl::memory::desc& plain, const dnnl::memory::desc& want, bool keep);

void set_weight_cache_enabled(bool on);  // on by default
void clear_weight_cache();
int64_t weight_cache_bytes();      // bytes held by cached copies
int64_t weight_cache_reorders();   // reorders done so far (misses), for tests and benchmarks

}  // namespace packrat::cpu
