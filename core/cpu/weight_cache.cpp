#include "core/cpu/weight_cache.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace packrat::cpu {

namespace {
struct Entry {
  std::weak_ptr<Storage> storage;
  const Storage* key;
  int64_t version;
  dnnl::memory::desc plain, want;
  Tensor buffer;  // (want.get_size() / 4,) the reordered weight
};

struct Cache {
  std::mutex mutex;
  std::vector<Entry> entries;
  bool enabled = true;
};

Cache& cache() {
  static Cache c;
  return c;
}

std::atomic<int64_t> g_reorders{0};
}  // namespace

Tensor weights_as(const Tensor& w, const dnnl::memory::desc& plain, const dnnl::memory::desc& want, bool keep) {
  if (want == plain) return w;
  Cache& c = cache();
  std::unique_lock lock(c.mutex);
  const bool parameter = w.storage()->allocation->tag() == MemTag::Parameter;
  if (c.enabled && parameter) {
    // Drop entries whose weight is gone (its storage address may be reused).
    std::erase_if(c.entries, [](const Entry& e) { return e.storage.expired(); });
    auto it = std::find_if(c.entries.begin(), c.entries.end(), [&](const Entry& e) {
      return e.key == w.storage().get() && e.plain == plain && e.want == want;
    });
    if (it != c.entries.end()) {
      if (it->version == w.version()) return it->buffer;
      c.entries.erase(it);  // stale: free it before reordering again
    }
  }
  ++g_reorders;
  Tensor buffer = reorder_into_buffer(w, plain, want, MemTag::Workspace);
  if (c.enabled && parameter && keep)
    c.entries.push_back(Entry{w.storage(), w.storage().get(), w.version(), plain, want, buffer});
  return buffer;
}

void set_weight_cache_enabled(bool on) {
  std::unique_lock lock(cache().mutex);
  cache().enabled = on;
  if (!on) cache().entries.clear();
}

bool weight_cache_enabled() { return cache().enabled; }

void clear_weight_cache() {
  std::unique_lock lock(cache().mutex);
  cache().entries.clear();
}

int64_t weight_cache_bytes() {
  std::unique_lock lock(cache().mutex);
  int64_t bytes = 0;
  for (const Entry& e : cache().entries)
    if (!e.storage.expired() && e.buffer.defined()) bytes += static_cast<int64_t>(e.buffer.nbytes());
  return bytes;
}

int64_t weight_cache_reorders() { return g_reorders.load(); }

}  // namespace packrat::cpu
