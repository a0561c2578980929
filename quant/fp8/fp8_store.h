#pragma once
// The fp8 store (`{scheme: fp8, format: e4m3|e5m2, scale: per_tensor|per_group, group_size: G}`):
// COAT's activation format. Every f32 Value and Derivative request is kept as one 8-bit float code
// an element (quant/fp8/fp8_math.h: round to nearest even, saturating) and its f32 scales, one per
// group of G consecutive elements of the buffer as it lies (per_group) or one for the tensor
// (per_tensor): numel + 4 * groups bytes, allocated under MemTag::Saved on the saved tensor's
// device. Backward gets the decoded value, or f' of it; the rest (relu-family derivatives as
// 1-bit masks, masks and indices packed exactly, exact requests in FP32, dedup, the in-place
// check) is quant/store/compressing_store.h's. Deterministic: no noise, so a recomputed segment
// writes the same codes. A GPU tensor is encoded and decoded there by the CUDA kernels
// (quant/cuda/fp8_codec_cuda.cu), writing the CPU's bytes.
#include <memory>

#include "quant/fp8/fp8_codec.h"
#include "quant/policy/scheme_options.h"
#include "quant/store/compressing_store.h"

namespace packrat {

class Fp8Store : public CompressingStore {
 public:
  explicit Fp8Store(Fp8Config c = {});
  // Options: format e4m3|e5m2 (e4m3), scale per_tensor|per_group (per_group), group_size >= 1
  // (128; per_group only: with per_tensor it is an error naming the key).
  static Fp8Config parse_options(SchemeOptions& o);

  std::string_view scheme() const override { return "fp8"; }
  const Fp8Config& config() const { return cfg_; }

 protected:
  std::unique_ptr<Encoded> encode(const Tensor& x, const SaveRequest& r) override;
  Tensor values(const Encoded& enc, const Entry& e) override;
  bool codec_on_devices() const override { return true; }  // quant/fp8/fp8_codec.h's entry points

 private:
  struct Codes;  // the Encoded of one tensor
  Fp8Config cfg_;
};

// Factory for the config; make_store checks that every option was read.
std::unique_ptr<SavedTensorStore> make_fp8_store(SchemeOptions& o);

}  // namespace packrat
