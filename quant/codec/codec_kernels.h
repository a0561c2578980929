#pragma once
// One device's compression kernels, shaped like Backend (core/backend.h): a table of the codecs'
// kernels per device. The codec entry points (quant/group/group_quant.h, quant/mixed/mixed_quant.h,
// quant/fewbit/fewbit_codec.h, quant/fp8/fp8_codec.h, quant/bits/bitpack.h) check what every device shares, then call
// codecs(device).<kernel> for the device of their tensors; a kernel runs there and never copies a
// tensor to the host behind the caller's back.
//   the CPU:   quant/cpu/cpu_codecs.cpp, over the CPU kernels of quant/cpu/
//   CUDA:      quant/cuda/cuda_codecs.cpp, over the kernels of quant/cuda/ (CUDA builds only)
//   a test device: its own table (set_codecs; the emulated GPU of tests/support/emulated_gpu.h
//              runs the CPU's on its host memory)
// A new device's codecs: a folder quant/<device>/ with its kernels and its table, and one line in
// codecs() (quant/codec/codec_kernels.cpp). The per-element bodies every device runs stay in the
// schemes' folders (PACKRAT_HD, CUDA-free), so a code written on one device decodes
// bit-identically on another.
//
// A store whose codec has no device kernels (a scheme of your own whose store does not say
// CompressingStore::codec_on_devices) refuses a device tensor with check_codec_device.
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/activation_id.h"
#include "core/device.h"
#include "core/tensor.h"
#include "quant/fewbit/fewbit_codec.h"
#include "quant/fp8/fp8_math.h"
#include "quant/group/group_quant.h"
#include "quant/mixed/mixed_quant.h"

namespace packrat {

struct Pointwise;

class CodecKernels {
 public:
  virtual ~CodecKernels() = default;

  // Whether the kernels walk an NHWC tensor in its plain order themselves (a GPU's: staged through
  // shared memory); where not, an NHWC tensor goes through a plain copy (codec_order, mixed_codec_order).
  virtual bool walks_nhwc() const { return false; }

  // ---- per-group quantization (quant/group/group_quant.h; arguments checked by the entry points)
  virtual void quantize_groups(const Tensor& x, const GroupGeometry& g, Rounding rounding, const QuantNoise& noise,
                               const Tensor& codes, const Tensor& meta, std::vector<double>* group_range_sq,
                               const CodecWalk& walk) = 0;
  virtual void dequantize_groups(const Tensor& codes, const Tensor& meta, const GroupGeometry& g, const Tensor& out,
                                 const CodecWalk& walk) = 0;
  virtual void dequantize_groups_apply(const Tensor& codes, const Tensor& meta, const GroupGeometry& g,
                                       ActivationId fn, bool from_output, const Tensor& grad, const Tensor& gx,
                                       const CodecWalk& walk) = 0;

  // ---- mixed bucket quantization (quant/mixed/mixed_quant.h)
  virtual MixedPacked quantize_mixed(const Tensor& x, const MixedQuantConfig& c, const QuantNoise& noise) = 0;
  virtual void dequantize_mixed(const MixedPacked& p, const Tensor& out) = 0;
  virtual void dequantize_mixed_apply(const MixedPacked& p, ActivationId fn, bool from_output, const Tensor& grad,
                                      const Tensor& gx) = 0;

  // ---- few-bit codes (quant/fewbit/fewbit_codec.h)
  virtual void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const Tensor& src, const Tensor& y,
                             const Tensor& packed) = 0;
  virtual void fewbit_decode(const FewbitCoder& c, const Tensor& packed, const Tensor& grad, const Tensor& out) = 0;

  // ---- 8-bit floating point (quant/fp8/fp8_codec.h; arguments checked by the entry points, n > 0)
  virtual void fp8_encode(const Tensor& x, Fp8Format f, Fp8Scale s, const Fp8Geometry& g, const Tensor& codes,
                          const Tensor& scales) = 0;
  virtual void fp8_decode(const Tensor& codes, const Tensor& scales, Fp8Format f, const Fp8Geometry& g,
                          const Tensor& out) = 0;

  // ---- exact packing of masks and indices (quant/bits/bitpack.h)
  virtual int64_t pack_codes(const Tensor& src, int bits, const Tensor& packed) = 0;
  virtual void unpack_codes(const Tensor& packed, int bits, const Tensor& out) = 0;
};

// The codec kernels of device d. Without them there (a GPU in a build without CUDA) throws
// packrat::Error "<what> is on <d>, but this packrat was built without CUDA", e.g. what =
// "quantize_groups: the input".
CodecKernels& codecs(Device d, std::string_view what);

// Serves device d with `k` instead of its own kernels (nullptr: stop); for a device the tests
// emulate. Not the CPU.
void set_codecs(Device d, CodecKernels* k);

// Returns when d is the CPU; otherwise throws packrat::Error
// "<codec>: this scheme's codec has no GPU kernels, so nothing is compressed on cuda:0: <what>".
void check_codec_device(std::string_view codec, Device d, std::string_view what);

}  // namespace packrat
