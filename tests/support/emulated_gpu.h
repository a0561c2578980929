#pragma once
// An emulated GPU for tests without one: a device that is not the CPU (Device::cuda(1000), a
// GPU index no machine has), with its own allocator, whose primitives run the CPU backend's
// arithmetic on its (host) memory. Everything device-generic code does with a real GPU holds
// here: tensors on it refuse host access (data<T>(), to_vector(), item() throw), ops refuse to mix
// it with CPU tensors, Allocator::of(device) is its own allocator (the memory report reads it),
// copies to and from it go through its backend, and `device: cuda:1000` passes the trainer's
// device check. A training step that runs on it has no hidden host access left, and allocates
// nothing on the wrong device. The compression codecs run their CPU kernels on its memory (the
// test seam of quant/codec/codec_kernels.h), so the compressing stores' device paths run here too.
// What it cannot catch: memcpy on raw() pointers (its memory is host memory; grep for raw()
// instead), and anything about CUDA itself (kernels, streams, cudaMalloc). Its copy engine (the
// offload layer's side streams) runs each copy only when asked about it, so a missing wait shows.
//
//   EmulatedGpu gpu;                     // installed until it goes out of scope
//   DeviceScope on(EmulatedGpu::device());
#include <cstdint>

#include "core/allocator.h"
#include "core/device.h"

namespace packrat::testing {

class EmulatedCopyEngine;

class EmulatedGpu {
 public:
  EmulatedGpu();   // installs the backend (one at a time)
  ~EmulatedGpu();  // removes it; tensors left on it must be gone by then
  EmulatedGpu(const EmulatedGpu&) = delete;
  EmulatedGpu& operator=(const EmulatedGpu&) = delete;
  static constexpr Device device() { return Device::cuda(1000); }
  Allocator& allocator();
  // Its copy engine (tests/support/emulated_copy_engine.h): copies run when asked about, in order.
  EmulatedCopyEngine& copy_engine();
  // From now on its codecs say that they walk NHWC tensors, as a GPU's do, so that the plans a GPU
  // gets (codec_order) can be tested here; its kernels (the CPU's) still refuse such a walk.
  void claim_nhwc_walks();
  // Its convolution and matmul calls since it was installed, by whether TF32 was allowed there
  // (tf32_use(): what a GPU's cuDNN and cuBLAS would have been told).
  struct Tf32Calls {
    int64_t with_tf32 = 0, without = 0;
  };
  Tf32Calls convolutions() const;
  Tf32Calls matmuls() const;
};

}  // namespace packrat::testing
