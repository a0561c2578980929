#pragma once
// The device allocators: every byte of tensor memory comes from one, tagged with what it is
// for and the layer it belongs to. They are the single source of truth for memory reports.
// One Allocator per device, all with the same accounting (tags, layer scopes, peaks, byte
// limit, block cache); only where raw memory comes from differs (a MemorySource).
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"

namespace packrat {

enum class MemTag : uint8_t { Parameter, Gradient, OptimizerState, Activation, Saved, Workspace, Data };
constexpr size_t kNumTags = 7;
std::string_view tag_name(MemTag t);

struct MemoryStats {
  Device device;                            // the device whose allocator measured these bytes
  std::array<int64_t, kNumTags> current{};  // bytes held now, per tag
  std::array<int64_t, kNumTags> peak{};     // highest `current` per tag since reset_peak()
  int64_t total_current = 0;
  int64_t total_peak = 0;
  int64_t at(MemTag t) const { return current[static_cast<size_t>(t)]; }
  int64_t peak_at(MemTag t) const { return peak[static_cast<size_t>(t)]; }
};

class Allocator;
class MemoryTimeline;

// Raw memory of one device: the CPU's aligned heap, cudaMalloc for a GPU.
class MemorySource {
 public:
  virtual ~MemorySource() = default;
  virtual void* allocate(size_t bytes) = 0;  // nullptr when the device has no more
  virtual void release(void* p, size_t bytes) = 0;
  // Blocks below this size go straight back to the source instead of the allocator's cache
  // (the CPU heap has its own bins for small blocks; cudaMalloc has none).
  virtual size_t min_cached_bytes() const = 0;
  // The most bytes of freed blocks the allocator keeps for reuse. By default 4 GiB: the heap never
  // refuses, so only a bound keeps the cache from holding what an earlier workload freed. A GPU's
  // memory has no bound, as in PyTorch's caching allocator: a step's freed blocks are the next
  // step's, cudaMalloc and cudaFree synchronise the device, and when the device refuses a block
  // the allocator empties its cache and asks again.
  static constexpr int64_t kDefaultMaxCachedBytes = int64_t{4} << 30;
  virtual int64_t max_cached_bytes() const { return kDefaultMaxCachedBytes; }
};

// One block handed out by an allocator; freed (and un-accounted) by its destructor.
class Allocation {
 public:
  Allocation(Allocator* owner, void* data, size_t bytes, size_t rounded, MemTag tag, std::string layer)
      : owner_(owner), data_(data), bytes_(bytes), rounded_(rounded), tag_(tag), layer_(std::move(layer)) {}
  ~Allocation();
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const;
  MemTag tag() const { return tag_; }
  const std::string& layer() const { return layer_; }
  // Moves the bytes to another tag's account, e.g. Activation -> Saved when the FP32 store
  // keeps a reference to a forward output for backward.
  void retag(MemTag tag);

 private:
  Allocator* owner_;
  void* data_;
  size_t bytes_;    // as requested: what the tags count
  size_t rounded_;  // as allocated (a multiple of the alignment)
  MemTag tag_;
  std::string layer_;
};

class Allocator {
 public:
  Allocator(Device device, std::unique_ptr<MemorySource> source);
  ~Allocator();
  static Allocator& cpu();
  // The allocator of any device (its backend's); throws packrat::Error when the device is not
  // available (CUDA not built, no such GPU).
  static Allocator& of(Device device);
  Device device() const { return device_; }

  // Throws LimitExceeded (naming tag, layer, request and limit) when the byte limit would be
  // exceeded, OutOfMemory when the device refuses the memory.
  std::shared_ptr<Allocation> allocate(size_t bytes, MemTag tag);

  MemoryStats stats() const;
  int64_t current(MemTag t) const { return current_[static_cast<size_t>(t)].load(); }
  int64_t peak(MemTag t) const { return peak_[static_cast<size_t>(t)].load(); }
  int64_t total_current() const { return total_.load(); }
  int64_t total_peak() const { return total_peak_.load(); }
  void reset_peak();
  // A peak of the total over a phase of a step (a checkpoint segment's recompute and backward),
  // kept apart from the step's peaks: restart_window() starts a window at the current total and
  // returns the peak of the one it ends; raise_window() lifts the current window's peak to at
  // least `bytes` (a nested phase that restarted it gives back what it ended).
  int64_t restart_window();
  void raise_window(int64_t bytes);
  // Current bytes of one tag per layer name ("" for allocations outside any LayerScope).
  std::map<std::string, int64_t> current_by_layer(MemTag t) const;

  // 0 means no limit.
  void set_limit(int64_t bytes) {
    limit_ = bytes;
    empty_cache();  // a limit is about to be probed (max-batch search): start from the OS
  }
  int64_t limit() const { return limit_; }

  // Freed blocks are kept for reuse by a later request of the same size (or up to 1/8 less): a training
  // step asks for the same sizes every time, and fresh memory from the OS costs a page fault
  // per 4 KiB on first touch. The tags count live tensor bytes only; the cache is extra
  // memory the process holds ("reserved"), reported separately and returned by empty_cache().
  // The cache holds at most the source's max_cached_bytes(); a block freed into a full cache
  // evicts the blocks freed longest ago, so a process that changes workload (a plan profiling
  // thirty options, then training one) keeps the blocks of what it runs now, not of what it ran first.
  int64_t cached_bytes() const { return cached_.load(); }
  void empty_cache();

  // Records every event into `t` from now on (core/memory_timeline.h); null stops. mark() names
  // the point between events (a step's phase) when a timeline records, and costs nothing otherwise.
  void set_timeline(MemoryTimeline* t);
  void mark(std::string_view name);

 private:
  friend class Allocation;
  void account(MemTag tag, const std::string& layer, int64_t delta);
  Device device_;
  std::unique_ptr<MemorySource> source_;
  void* take_cached(size_t& size);  // size in: wanted; out: the block's
  void give_back(void* p, size_t rounded);
  void evict_oldest();  // under cache_mutex_
  struct CachedBlock {
    void* p;
    size_t size;
  };
  std::mutex cache_mutex_;
  std::list<CachedBlock> freed_order_;                                   // oldest first
  std::multimap<size_t, std::list<CachedBlock>::iterator> free_blocks_;  // rounded size -> block
  std::atomic<int64_t> cached_{0};
  std::array<std::atomic<int64_t>, kNumTags> current_{};
  std::array<std::atomic<int64_t>, kNumTags> peak_{};
  std::atomic<int64_t> total_{0}, total_peak_{0}, window_peak_{0};
  std::atomic<int64_t> limit_{0};
  mutable std::mutex layer_mutex_;
  std::map<std::string, std::array<int64_t, kNumTags>> by_layer_;
  std::atomic<MemoryTimeline*> timeline_{nullptr};
};

// Thread-local context for new allocations: which tag and which layer.
class TagScope {
 public:
  explicit TagScope(MemTag tag);
  ~TagScope();
  static MemTag current();

 private:
  MemTag previous_;
};

class LayerScope {
 public:
  explicit LayerScope(std::string_view name);  // nested names are joined with '.'
  // The whole name, whatever scope is open (memory moved on behalf of another layer: offload).
  struct Whole {};
  LayerScope(std::string_view name, Whole);
  ~LayerScope();
  static const std::string& current();

 private:
  size_t previous_size_;
  std::string previous_;  // Whole: the name it replaced
  bool whole_ = false;
};

// "conv2d layer1.0.conv1" (or "conv2d" outside any layer): the prefix of every op's error message.
std::string op_where(std::string_view op);

}  // namespace packrat
