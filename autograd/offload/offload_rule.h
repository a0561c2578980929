#pragma once
// Which saved tensors the offload layer moves to host memory: the config's `memory.offload`
// (or a preset that offloads: gact-L2, actnn-L4), matched on a save request as saved_tensors
// rules are (op kinds and layer-name globs; empty lists match everything), and by size.
//
//   memory:
//     offload: {ops: [conv2d, linear], layers: ["layer3.*"], min_bytes: 65536, prefetch: 2,
//               in_flight_bytes: 268435456}
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/saved_tensor_store.h"

namespace packrat {

// The deepest prefetch: the backward tells stores of this many nodes ahead (autograd/tape.h).
constexpr int kMaxOffloadPrefetch = 16;

struct OffloadRule {
  std::vector<std::string> ops;     // op kinds ("conv2d") or activation names ("gelu"); empty: any
  std::vector<std::string> layers;  // globs on the layer name ("layer1.*"); empty: any
  int64_t min_bytes = 0;            // a handle whose payload is smaller stays on the device
  int prefetch = 2;                 // nodes ahead of the backward that their payloads come back (<= kMaxOffloadPrefetch)
  // The most bytes whose copy to the host may be under way in the forward: their device buffers
  // are still held, so past this the forward waits for the oldest copy (0: for each one, as
  // PyTorch's save_on_cpu, whose copies run on the compute stream). Without a bound the copies
  // fall behind a fast forward and the device keeps nearly all it saved (an H200 held 3.55 of
  // ResNet-18's 3.70 GB at batch 512).
  int64_t in_flight_bytes = int64_t{256} << 20;
  std::string where = "memory.offload";  // for messages: the key, or the preset that asked

  bool matches(const SaveRequest& r) const;  // by op and layer (min_bytes is checked on the payload)
};

}  // namespace packrat
