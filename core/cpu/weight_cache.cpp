#include "core/cpu/weight_cache.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace packrat::cpu {

namespace {
// One kept copy of a weight.
struct Entry {
  int64_t version;
  dnnl::memory::desc plain, want;
  Tensor buffer;  // (want.get_size() / 4,) the reordered weight
};
// A weight's kept copies, held by its Storage (Storage::derived): they are freed with the weight,
// not when the next convolution looks them up (a model freed after its evaluation would leave
// them in the next run's Workspace figures).
struct Copies {
  std::vector<Entry> entries;
};

struct Cache {
  std::mutex mutex;
  std::vector<std::weak_ptr<Storage>> holders;  // the storages that hold copies (for the counts)
  bool enabled = true;
};

Cache& cache() {
  static Cache c;
  return c;
}

std::atomic<int64_t> g_reorders{0};

// The storages that hold copies and are alive; the freed ones leave the list. Under the mutex.
std::vector<std::shared_ptr<Storage>> live_holders(Cache& c) {
  std::vector<std::shared_ptr<Storage>> out;
  std::erase_if(c.holders, [&](const std::weak_ptr<Storage>& h) {
    std::shared_ptr<Storage> s = h.lock();
    if (!s) return true;
    out.push_back(std::move(s));
    return false;
  });
  return out;
}

// w (laid out as `plain`) reordered into `want` in a Workspace buffer. An f32 weight wanted in 16
// bits is first converted where it lies (SIMD, both threads), then reordered 16 bits to 16 bits:
// oneDNN 2.6's f32 -> bf16 reorders into AMX's blocked formats ran at about 3 GB/s on a
// weight read from memory (EfficientNet-B0's 1152 x 192 1x1 weight: 0.31 ms, 12 ms of its bf16
// step for all its weights, forward and data gradient).
Tensor reorder_into_buffer_converted(const Tensor& w, const dnnl::memory::desc& plain, const dnnl::memory::desc& want) {
  const auto wanted = want.data_type();
  const bool to_half = plain.data_type() == dnnl::memory::data_type::f32 &&
                       (wanted == dnnl::memory::data_type::bf16 || wanted == dnnl::memory::data_type::f16) &&
                       w.dtype() == DType::f32 && w.layout() == Layout::Plain;
  if (!to_half) return reorder_into_buffer(w, plain, want, MemTag::Workspace);
  TagScope copies(MemTag::Workspace);
  const Tensor half = w.to(wanted == dnnl::memory::data_type::bf16 ? DType::bf16 : DType::f16);
  dnnl::memory::desc half_plain = plain;  // the same order in 16 bits
  half_plain.data.data_type = static_cast<dnnl_data_type_t>(wanted);
  return reorder_into_buffer(half, half_plain, want, MemTag::Workspace);
}
}  // namespace

Tensor weights_as(const Tensor& w, const dnnl::memory::desc& plain, const dnnl::memory::desc& want, bool keep) {
  if (want == plain) return w;
  Cache& c = cache();
  std::unique_lock lock(c.mutex);
  Storage& storage = *w.storage();
  const bool parameter = storage.allocation->tag() == MemTag::Parameter;
  auto* copies = static_cast<Copies*>(storage.derived.get());
  if (c.enabled && parameter && copies) {
    auto it = std::find_if(copies->entries.begin(), copies->entries.end(),
                           [&](const Entry& e) { return e.plain == plain && e.want == want; });
    if (it != copies->entries.end()) {
      if (it->version == w.version()) return it->buffer;
      copies->entries.erase(it);  // stale: free it before reordering again
    }
  }
  ++g_reorders;
  Tensor buffer = reorder_into_buffer_converted(w, plain, want);
  if (c.enabled && parameter && keep) {
    if (!copies) {
      storage.derived = std::make_shared<Copies>();
      copies = static_cast<Copies*>(storage.derived.get());
      c.holders.push_back(w.storage());
    }
    copies->entries.push_back(Entry{w.version(), plain, want, buffer});
  }
  return buffer;
}

void clear_weight_cache() {
  std::unique_lock lock(cache().mutex);
  for (const auto& s : live_holders(cache())) s->derived.reset();
  cache().holders.clear();
}

void set_weight_cache_enabled(bool on) {
  if (!on) clear_weight_cache();
  std::unique_lock lock(cache().mutex);
  cache().enabled = on;
}

int64_t weight_cache_bytes() {
  std::unique_lock lock(cache().mutex);
  int64_t bytes = 0;
  for (const auto& s : live_holders(cache()))
    if (const auto* copies = static_cast<const Copies*>(s->derived.get()))
      for (const Entry& e : copies->entries) bytes += static_cast<int64_t>(e.buffer.nbytes());
  return bytes;
}

int64_t weight_cache_reorders() { return g_reorders.load(); }

}  // namespace packrat::cpu
