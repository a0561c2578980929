#include "core/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "core/backend.h"
#include "core/error.h"
#include "core/memory_timeline.h"

namespace packrat {

namespace {
thread_local MemTag t_tag = MemTag::Activation;
thread_local std::string t_layer;
constexpr size_t kAlignment = 64;  // a cache line, and what AVX-512 loads like

void raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t p = peak.load(std::memory_order_relaxed);
  while (value > p && !peak.compare_exchange_weak(p, value, std::memory_order_relaxed)) {
  }
}
// The CPU's memory: 64-byte aligned blocks from the C heap.
class HostMemory final : public MemorySource {
 public:
  void* allocate(size_t bytes) override { return std::aligned_alloc(kAlignment, bytes); }
  void release(void* p, size_t) override { std::free(p); }
  size_t min_cached_bytes() const override { return 64 * 1024; }  // malloc's own bins are as good below
};
}  // namespace

std::string_view tag_name(MemTag t) {
  static constexpr std::array<std::string_view, kNumTags> names = {
      "Parameter", "Gradient", "OptimizerState", "Activation", "Saved", "Workspace", "Data"};
  return names[static_cast<size_t>(t)];
}

Allocation::~Allocation() {
  owner_->account(tag_, layer_, -static_cast<int64_t>(bytes_));
  owner_->give_back(data_, rounded_);
}

Device Allocation::device() const { return owner_->device(); }

void Allocation::retag(MemTag tag) {
  if (tag == tag_) return;
  auto& a = *owner_;
  a.account(tag_, layer_, -static_cast<int64_t>(bytes_));
  tag_ = tag;
  a.account(tag_, layer_, static_cast<int64_t>(bytes_));
}

Allocator::Allocator(Device device, std::unique_ptr<MemorySource> source)
    : device_(device), source_(std::move(source)) {}

Allocator::~Allocator() { empty_cache(); }

Allocator& Allocator::cpu() {
  // Never destroyed: tensors held by other statics may be freed after this would be.
  static Allocator* instance = new Allocator(Device::cpu(), std::make_unique<HostMemory>());
  return *instance;
}

Allocator& Allocator::of(Device device) { return device.is_cpu() ? cpu() : backend(device).allocator(); }

std::shared_ptr<Allocation> Allocator::allocate(size_t bytes, MemTag tag) {
  const int64_t limit = limit_.load();
  if (limit > 0 && total_.load() + static_cast<int64_t>(bytes) > limit) {
    throw LimitExceeded(fmt::format(
        "out of memory on {}: allocating {} bytes of {} for layer '{}' would exceed the limit of {} bytes "
        "({} bytes held)",
        device_.str(), bytes, tag_name(tag), t_layer, limit, total_.load()));
  }
  const size_t rounded = std::max<size_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  size_t held = rounded;  // the block's real size: a cached block may be a little larger
  void* p = take_cached(held);
  if (!p) p = source_->allocate(held = rounded);
  if (!p) {
    empty_cache();
    p = source_->allocate(rounded);
  }
  if (!p)
    throw OutOfMemory(fmt::format("out of memory on {}: the device refused {} bytes of {} for layer '{}'",
                                  device_.str(), bytes, tag_name(tag), t_layer));
  account(tag, t_layer, static_cast<int64_t>(bytes));
  return std::make_shared<Allocation>(this, p, bytes, held, tag, t_layer);
}

void* Allocator::take_cached(size_t& size) {
  std::lock_guard lock(cache_mutex_);
  // Best fit among blocks at most 1/8 larger: sizes that vary a little from step to step
  // (a mixed-precision code buffer) still reuse memory, without wasting much of a block.
  auto it = free_blocks_.lower_bound(size);
  if (it == free_blocks_.end() || it->first > size + size / 8) return nullptr;
  it = std::prev(free_blocks_.upper_bound(it->first));  // that size's last freed: warmest in the caches
  void* p = it->second->p;
  size = it->first;
  freed_order_.erase(it->second);
  free_blocks_.erase(it);
  cached_ -= static_cast<int64_t>(size);
  return p;
}

void Allocator::evict_oldest() {
  const auto oldest = freed_order_.begin();
  auto it = free_blocks_.lower_bound(oldest->size);
  while (it->second != oldest) ++it;  // found at once: blocks of a size sit in the order they were freed
  source_->release(oldest->p, oldest->size);
  cached_ -= static_cast<int64_t>(oldest->size);
  free_blocks_.erase(it);
  freed_order_.erase(oldest);
}

void Allocator::give_back(void* p, size_t rounded) {
  const int64_t most = source_->max_cached_bytes();
  if (rounded < source_->min_cached_bytes() || static_cast<int64_t>(rounded) > most) {
    source_->release(p, rounded);
    return;
  }
  std::lock_guard lock(cache_mutex_);
  while (cached_.load() + static_cast<int64_t>(rounded) > most) evict_oldest();
  freed_order_.push_back({p, rounded});
  free_blocks_.emplace(rounded, std::prev(freed_order_.end()));
  cached_ += static_cast<int64_t>(rounded);
}

void Allocator::empty_cache() {
  std::lock_guard lock(cache_mutex_);
  for (const CachedBlock& b : freed_order_) source_->release(b.p, b.size);
  freed_order_.clear();
  free_blocks_.clear();
  cached_ = 0;
}

void Allocator::account(MemTag tag, const std::string& layer, int64_t delta) {
  const auto i = static_cast<size_t>(tag);
  const int64_t now = current_[i].fetch_add(delta) + delta;
  const int64_t total = total_.fetch_add(delta) + delta;
  if (delta > 0) {
    raise_peak(peak_[i], now);
    raise_peak(total_peak_, total);
    raise_peak(window_peak_, total);
  }
  std::lock_guard lock(layer_mutex_);
  by_layer_[layer][i] += delta;
  if (MemoryTimeline* t = timeline_.load()) {
    std::array<int64_t, kNumTags> now_by_tag;
    for (size_t k = 0; k < kNumTags; ++k) now_by_tag[k] = current_[k].load();
    t->record(tag, layer, delta, now_by_tag, total_.load());
  }
}

void Allocator::set_timeline(MemoryTimeline* t) {
  std::lock_guard lock(layer_mutex_);
  timeline_.store(t);
}

void Allocator::mark(std::string_view name) {
  if (MemoryTimeline* t = timeline_.load()) t->mark(name);
}

MemoryStats Allocator::stats() const {
  MemoryStats s;
  s.device = device_;
  for (size_t i = 0; i < kNumTags; ++i) {
    s.current[i] = current_[i].load();
    s.peak[i] = peak_[i].load();
  }
  s.total_current = total_.load();
  s.total_peak = total_peak_.load();
  return s;
}

void Allocator::reset_peak() {
  for (size_t i = 0; i < kNumTags; ++i) peak_[i] = current_[i].load();
  total_peak_ = total_.load();
}

int64_t Allocator::restart_window() { return window_peak_.exchange(total_.load()); }

void Allocator::raise_window(int64_t bytes) { raise_peak(window_peak_, bytes); }

std::map<std::string, int64_t> Allocator::current_by_layer(MemTag t) const {
  std::lock_guard lock(layer_mutex_);
  std::map<std::string, int64_t> out;
  for (const auto& [layer, bytes] : by_layer_)
    if (bytes[static_cast<size_t>(t)] != 0) out[layer] = bytes[static_cast<size_t>(t)];
  return out;
}

TagScope::TagScope(MemTag tag) : previous_(t_tag) { t_tag = tag; }
TagScope::~TagScope() { t_tag = previous_; }
MemTag TagScope::current() { return t_tag; }

LayerScope::LayerScope(std::string_view name) : previous_size_(t_layer.size()) {
  if (!name.empty()) {
    if (!t_layer.empty()) t_layer += '.';
    t_layer += name;
  }
}
LayerScope::LayerScope(std::string_view name, Whole) : previous_size_(0), previous_(t_layer), whole_(true) {
  t_layer = name;
}
LayerScope::~LayerScope() {
  if (whole_)
    t_layer = std::move(previous_);
  else
    t_layer.resize(previous_size_);
}
const std::string& LayerScope::current() { return t_layer; }

std::string op_where(std::string_view op) {
  return t_layer.empty() ? std::string(op) : std::string(op) + " " + t_layer;
}

}  // namespace packrat
