#include "autograd/offload/offloader.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "autograd/tape.h"
#include "core/backend.h"

namespace packrat {

Offloader::Offloader(OffloadRule rule) : rule_(std::move(rule)) {}

Offloader::~Offloader() {
  // Copies still under way write or read buffers held here: let them finish before those go.
  for (auto& [slot, b] : buffers_)
    for (CopyEvent ev : {b.out, b.back})
      if (ev) try {
          b.engine->host_wait(ev);
        } catch (const std::exception& e) {
          spdlog::error("offload: {}", e.what());
        }
  for (Retired& r : retired_) try {
      r.engine->host_wait(r.event);
    } catch (const std::exception& e) {
      spdlog::error("offload: {}", e.what());
    }
}

namespace {

int64_t held_bytes(const Tensor& t) { return static_cast<int64_t>(t.storage()->allocation->bytes()); }

}  // namespace

void Offloader::saved(const SavedHandle& h, const SaveRequest& r) {
  std::vector<PayloadSlot> slots;
  h.store->payload(h, slots);
  std::lock_guard lock(mutex_);
  // Buffers on a device, and buffers moved already (for another handle that saved the same tensor).
  std::erase_if(slots, [&](const PayloadSlot& s) {
    return !s.tensor->defined() || (s.tensor->is_cpu() && !buffers_.contains(s.tensor));
  });
  if (slots.empty()) return;
  int64_t bytes = 0;
  for (const PayloadSlot& s : slots) bytes += held_bytes(*s.tensor);
  // A recomputed segment's saves (in a backward) are used at once: they stay.
  const bool move = !in_backward() && rule_.matches(r) && bytes >= rule_.min_bytes;
  poll();
  // Every handle's buffers are counted, moved or not, so that a buffer two ops saved (a ReLU's
  // output, and the convolution after it) is brought back for either, and kept until both are done.
  std::vector<Tensor*>& list = handles_[key(h)];
  for (size_t i = 0; i < slots.size(); ++i) {
    Tensor* slot = slots[i].tensor;
    auto [it, fresh] = buffers_.try_emplace(slot);
    Buffer& b = it->second;
    b.refs += 1;
    list.push_back(slot);
    if (fresh) {
      b.slot = slot;
      b.tag_left = slots[i].tag_left;
      b.layer = LayerScope::current();
      b.what = fmt::format("{} {}: saved buffer {} of {} ({} bytes)", r.op, r.name, i + 1, slots.size(),
                           held_bytes(*slot));
    }
    if (move && b.where == Where::Device && !b.moved) move_out(b);
  }
  if (move) bound_going_out();
}

void Offloader::bound_going_out() {
  for (;;) {
    int64_t bytes = 0;  // device buffers held for a copy out under way
    Buffer* oldest = nullptr;
    for (Tensor* slot : going_out_) {
      auto it = buffers_.find(slot);
      if (it == buffers_.end() || it->second.where != Where::GoingOut) continue;
      if (oldest == nullptr) oldest = &it->second;
      bytes += held_bytes(it->second.device);
    }
    if (oldest == nullptr || bytes <= rule_.in_flight_bytes) return;
    oldest->engine->host_wait(oldest->out);
    stats_.forward_waits += 1;
    poll();
  }
}

void Offloader::move_out(Buffer& b) {
  Tensor& slot = *b.slot;
  CopyEngine* engine = backend(slot.device()).copy_engine();
  if (engine == nullptr) return;  // a device with no second memory
  if (std::find(engines_.begin(), engines_.end(), engine) == engines_.end()) engines_.push_back(engine);
  b.engine = engine;
  b.device = slot;
  b.shape = slot.shape();
  b.dtype = slot.dtype();
  b.layout = slot.layout();
  b.on = slot.device();
  const int64_t n = held_bytes(slot);
  b.host = Tensor::empty_in(engine->host_pool(), Shape{n}, DType::u8, Layout::Plain, MemTag::Saved);  // (nbytes,)
  b.host.storage()->version = slot.version();  // the same buffer, moved: the store's in-place check still holds
  // The store lets go of the device buffer: where the forward still holds it, it is its own again.
  if (b.tag_left != MemTag::Saved) b.device.storage()->allocation->retag(b.tag_left);
  b.out = engine->copy(CopyDirection::ToHost, b.device, b.host, 0, b.what);
  slot = b.host;
  b.where = Where::GoingOut;
  b.moved = true;
  stats_.buffers_out += 1;
  stats_.bytes_to_host += n;
  going_out_.push_back(b.slot);
}

void Offloader::poll() {
  // Copies to the host finish in the order they were queued (one stream).
  while (!going_out_.empty()) {
    auto it = buffers_.find(going_out_.front());
    if (it != buffers_.end() && it->second.where == Where::GoingOut) {
      Buffer& b = it->second;
      if (!b.engine->done(b.out)) break;
      b.engine->forget(b.out);
      b.out = 0;
      b.device = Tensor();  // its device memory goes
      b.where = Where::Host;
    }
    going_out_.pop_front();
  }
  poll_retired();
}

void Offloader::poll_retired() {
  // Their data is no longer wanted: a copy that failed is logged, not thrown (this runs in a
  // release, which may be the clean-up of a step abandoned for that very error).
  std::erase_if(retired_, [](Retired& r) {
    try {
      if (!r.engine->done(r.event)) return false;
    } catch (const std::exception& e) {
      spdlog::warn("offload: {}", e.what());
    }
    r.engine->forget(r.event);
    return true;
  });
}

void Offloader::start_back(Buffer& b) {
  if (b.where == Where::GoingOut) {
    // The original is still on the device (its copy out not yet seen done): it goes back in place.
    retire(b.host, Tensor(), b.engine, b.out);
    b.out = 0;
    if (b.tag_left != MemTag::Saved) b.device.storage()->allocation->retag(MemTag::Saved);  // the store's again
    *b.slot = b.device;
    b.host = Tensor();
    b.device = Tensor();
    b.where = Where::Device;
    return;
  }
  LayerScope layer(b.layer, LayerScope::Whole{});  // the bytes belong to the layer that saved them
  b.device = Tensor::empty(b.shape, b.dtype, b.layout, MemTag::Saved, b.on);
  b.device.storage()->version = b.host.version();
  b.back = b.engine->copy(CopyDirection::ToDevice, b.host, b.device, 0, b.what);
  stats_.bytes_to_device += held_bytes(b.host);
  b.where = Where::ComingBack;
}

void Offloader::settle(Buffer& b) {
  b.engine->compute_wait(b.back);
  b.engine->forget(b.back);
  b.back = 0;
  *b.slot = b.device;
  // Its next user is a copy to the host that the copy engine orders after the compute stream's
  // work so far, which now waits for this copy: the host block can go back to the pool.
  b.host = Tensor();
  b.device = Tensor();
  b.where = Where::Device;
}

void Offloader::prefetch(const SavedHandle& h, int distance) {
  if (distance > rule_.prefetch) return;
  std::lock_guard lock(mutex_);
  auto it = handles_.find(key(h));
  if (it == handles_.end()) return;
  for (Tensor* slot : it->second) {
    Buffer& b = buffers_.at(slot);
    if (b.where == Where::Host || b.where == Where::GoingOut) start_back(b);
  }
}

void Offloader::ready(const SavedHandle& h) {
  std::lock_guard lock(mutex_);
  auto it = handles_.find(key(h));
  if (it == handles_.end()) return;
  bool synchronous = false, prefetched = false;
  for (Tensor* slot : it->second) {
    Buffer& b = buffers_.at(slot);
    if (b.where == Where::Device) continue;
    if (b.where == Where::ComingBack) {
      prefetched = true;
    } else {
      synchronous = true;
      start_back(b);
    }
    if (b.where == Where::ComingBack) settle(b);
  }
  if (synchronous)
    stats_.synchronous_loads += 1;
  else if (prefetched)
    stats_.prefetched_loads += 1;
}

void Offloader::retire(Tensor a, Tensor b, CopyEngine* e, CopyEvent ev) {
  retired_.push_back({std::move(a), std::move(b), e, ev});
}

void Offloader::release(const SavedHandle& h) {
  std::lock_guard lock(mutex_);
  auto it = handles_.find(key(h));
  if (it == handles_.end()) return;
  for (Tensor* slot : it->second) {
    auto bit = buffers_.find(slot);
    Buffer& b = bit->second;
    if (--b.refs > 0) continue;
    // A copy still running reads or writes these buffers: they live until it is done.
    if (b.out) retire(b.device, b.host, b.engine, b.out);
    if (b.back) retire(b.device, b.host, b.engine, b.back);
    buffers_.erase(bit);
  }
  handles_.erase(it);
  poll_retired();
}

void Offloader::finish_copies_out() {
  std::lock_guard lock(mutex_);
  for (auto& [slot, b] : buffers_)
    if (b.where == Where::GoingOut) b.engine->host_wait(b.out);
  for (Retired& r : retired_) r.engine->host_wait(r.event);
  poll();
}

OffloadStats Offloader::take_stats() {
  std::lock_guard lock(mutex_);
  for (CopyEngine* e : engines_) stats_.copy_busy_s += e->take_times().busy_s;
  OffloadStats s = stats_;
  stats_ = OffloadStats{};
  return s;
}

size_t Offloader::buffers_held() const {
  std::lock_guard lock(mutex_);
  return buffers_.size();
}

}  // namespace packrat
