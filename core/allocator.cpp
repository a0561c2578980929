#include "core/allocator.h"

#include <cstdlib>
#include <memory>

#include "core/error.h"

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
}  // namespace

std::string_view tag_name(MemTag t) {
  static constexpr std::array<std::string_view, kNumTags> names = {
      "Parameter", "Gradient", "OptimizerState", "Activation", "Saved", "Workspace", "Data"};
  return names[static_cast<size_t>(t)];
}

Allocation::~Allocation() {
  Allocator::cpu().account(tag_, layer_, -static_cast<int64_t>(bytes_));
  std::free(data_);
}

void Allocation::retag(MemTag tag) {
  if (tag == tag_) return;
  auto& a = Allocator::cpu();
  a.account(tag_, layer_, -static_cast<int64_t>(bytes_));
  tag_ = tag;
  a.account(tag_, layer_, static_cast<int64_t>(bytes_));
}

Allocator& Allocator::cpu() {
  static Allocator instance;
  return instance;
}

std::shared_ptr<Allocation> Allocator::allocate(size_t bytes, MemTag tag) {
  const int64_t limit = limit_.load();
  if (limit > 0 && total_.load() + static_cast<int64_t>(bytes) > limit) {
    throw OutOfMemory(fmt::format(
        "out of memory: allocating {} bytes of {} for layer '{}' would exceed the limit of {} bytes "
        "({} bytes held)",
        bytes, tag_name(tag), t_layer, limit, total_.load()));
  }
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!p) throw OutOfMemory(fmt::format("out of memory: the system refused {} bytes of {}", bytes, tag_name(tag)));
  account(tag, t_layer, static_cast<int64_t>(bytes));
  return std::make_shared<Allocation>(p, bytes, tag, t_layer);
}

void Allocator::account(MemTag tag, const std::string& layer, int64_t delta) {
  const auto i = static_cast<size_t>(tag);
  const int64_t now = current_[i].fetch_add(delta) + delta;
  const int64_t total = total_.fetch_add(delta) + delta;
  if (delta > 0) {
    raise_peak(peak_[i], now);
    raise_peak(total_peak_, total);
  }
  std::lock_guard lock(layer_mutex_);
  by_layer_[layer][i] += delta;
}

MemoryStats Allocator::stats() const {
  MemoryStats s;
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
LayerScope::~LayerScope() { t_layer.resize(previous_size_); }
const std::string& LayerScope::current() { return t_layer; }

}  // namespace packrat
