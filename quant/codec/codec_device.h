#pragma once
// Which kernel runs a compression codec: the device of the tensors it is handed. Every codec entry
// point (quant/group/group_quant.h, quant/mixed/mixed_quant.h, quant/fewbit/fewbit_codec.h, quant/bits/bitpack.h) runs its CPU kernel on CPU
// tensors and its CUDA kernel (quant/*_cuda.cu, over the same PACKRAT_HD per-element headers) on
// a GPU's; it never copies a tensor to the host behind the caller's back.
//
// A store whose codec has no device kernels (a scheme of your own whose store does not say
// CompressingStore::codec_on_devices) refuses a device tensor with check_codec_device.
#include <functional>
#include <initializer_list>
#include <string_view>

#include "core/device.h"
#include "core/tensor.h"

namespace packrat {

// Returns when d is the CPU; otherwise throws packrat::Error
// "<codec>: this scheme's codec has no GPU kernels, so nothing is compressed on cuda:0: <what>".
void check_codec_device(std::string_view codec, Device d, std::string_view what);

// ---- the per-device seam (tests only) ----------------------------------------------------------

// A device whose memory the host can address and whose codec kernels are the CPU's: the emulated
// GPU of tests/support/emulated_gpu.h. While one is set, a codec entry point handed tensors on its
// device calls run_on_host instead of a CUDA kernel.
class HostCodecOverride {
 public:
  virtual ~HostCodecOverride() = default;
  virtual Device device() const = 0;
  // Runs `kernel` (the entry point called again) with the storages of `operands` that are on
  // device() relabelled as the CPU's for its duration, so that the CPU kernel serves them.
  virtual void run_on_host(std::initializer_list<Tensor> operands, const std::function<void()>& kernel) = 0;
};

// Serves o->device() with o (nullptr: stop). One at a time.
void set_codec_override(HostCodecOverride* o);

// The entry points' seam: when d is served by the override, runs `kernel` through it and returns
// true; otherwise false (the caller launches its CUDA kernel, or fails without CUDA).
bool codec_ran_on_host(Device d, std::initializer_list<Tensor> operands, const std::function<void()>& kernel);

}  // namespace packrat
