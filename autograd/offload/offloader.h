#pragma once
// The offload layer: moves what a saved-tensor store keeps for a handle (its payload: codes,
// metadata, masks, or the FP32 tensor itself where nothing compresses) to page-locked host memory
// right after the save, and brings it back before the store reads it again, for any scheme. GACT's
// level L2 and ActNN's L4: compress, then move.
//
// In the forward, save() queues each payload buffer's copy to the host on the device's copy
// engine (core/copy_engine.h: a side stream, after the kernel that wrote it) and puts the host
// copy in the store's place; the device buffer is dropped once its copy is done (polled at each
// save). In the backward, the tape tells the stores of the next nodes to run how far away they are
// (SavedTensorStore::prefetch); a buffer `prefetch` nodes ahead or closer starts its copy back on
// the other stream, into a fresh device buffer, and the node's load makes the compute stream wait
// for that copy alone. A load nobody prefetched (an unusual backward order, a custom graph) copies
// it back then, and is counted (synchronous_loads).
//
// Buffers shared by two handles (a tensor two ops save) move once. Saves made during a backward
// (a recomputed segment's) stay on the device: they are used at once.
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "autograd/offload/offload_rule.h"
#include "autograd/saved_tensor_store.h"
#include "core/copy_engine.h"

namespace packrat {

// What the layer did over a step (since the last take_stats()).
struct OffloadStats {
  int64_t buffers_out = 0;          // payload buffers copied to the host
  int64_t bytes_to_host = 0;        // ... their bytes
  int64_t bytes_to_device = 0;      // bytes copied back
  int64_t prefetched_loads = 0;     // loads whose copy back was started ahead (prefetch)
  int64_t synchronous_loads = 0;    // loads that had to start their copy back themselves
  int64_t forward_waits = 0;        // saves that waited for an older copy out (rule's in_flight_bytes)
  double copy_busy_s = 0;           // the copy streams' busy time (GPU events; 0 where unmeasured)
};

class Offloader {
 public:
  explicit Offloader(OffloadRule rule);
  ~Offloader();
  Offloader(const Offloader&) = delete;
  Offloader& operator=(const Offloader&) = delete;

  const OffloadRule& rule() const { return rule_; }
  // After `h` was saved for request r (h: the store's own handle): moves its payload out when the
  // rule selects it, outside a backward, on a device with a copy engine.
  void saved(const SavedHandle& h, const SaveRequest& r);
  // The tape's hint: h's node runs `distance` nodes from now.
  void prefetch(const SavedHandle& h, int distance);
  // Before the store reads h: every buffer of its payload back on the device (the compute stream
  // waits for its copy).
  void ready(const SavedHandle& h);
  // Before the store releases h.
  void release(const SavedHandle& h);

  // The host waits for every copy to the host under way and drops their device buffers (what the
  // memory report reads after the forward: the device holds only what the rule leaves there).
  void finish_copies_out();
  OffloadStats take_stats();
  size_t buffers_held() const;  // payload buffers the layer tracks now (0 after a step)

 private:
  enum class Where : uint8_t { GoingOut, Host, ComingBack, Device };
  struct Buffer {  // one payload buffer of a live handle (moved or not), however many handles list it
    Tensor* slot = nullptr;  // in the store: the host copy, or a device copy once back
    CopyEngine* engine = nullptr;
    Where where = Where::Device;  // Device: as the store made it, or back
    bool moved = false;           // it went out this step (it comes back once, and stays)
    Tensor device;           // GoingOut: the original, until its copy is done; ComingBack: the copy's target
    Tensor host;             // (nbytes,) u8 in the engine's host pool
    Shape shape;             // of the device buffer, to make it again
    DType dtype = DType::u8;
    Layout layout = Layout::Plain;
    Device on;               // its device
    std::string layer, what;  // the layer that saved it; "conv2d layer1.0.conv1: saved buffer 2 of 3 (1.50 MiB)"
    MemTag tag_left = MemTag::Saved;  // PayloadSlot::tag_left
    CopyEvent out = 0, back = 0;
    int refs = 0;            // handles listing it
  };
  using HandleKey = std::pair<const SavedTensorStore*, uint64_t>;
  static HandleKey key(const SavedHandle& h) { return {h.store, h.id}; }

  void move_out(Buffer& b);          // queues the copy to the host; the host copy takes the slot
  void poll();                       // drops device buffers whose copy out is done, and poll_retired()
  void poll_retired();               // drops retired buffers whose copy is done
  void bound_going_out();            // waits for the oldest copies out while over rule_.in_flight_bytes
  void start_back(Buffer& b);        // queues the copy back
  void settle(Buffer& b);            // compute waits for the copy back; the device copy takes the slot
  void retire(Tensor a, Tensor b, CopyEngine* e, CopyEvent ev);  // keeps a and b alive until ev is done

  OffloadRule rule_;
  mutable std::mutex mutex_;
  std::map<Tensor*, Buffer> buffers_;
  std::map<HandleKey, std::vector<Tensor*>> handles_;
  std::deque<Tensor*> going_out_;  // buffers whose copy to the host was queued, in that order
  struct Retired {
    Tensor a, b;
    CopyEngine* engine;
    CopyEvent event;
  };
  std::vector<Retired> retired_;
  std::vector<CopyEngine*> engines_;
  OffloadStats stats_;
};

}  // namespace packrat
