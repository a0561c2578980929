#pragma once
// The few-bit store (Few-Bit Backward, arXiv:2202.00441, Alg. 1): for an activation's Need::Derivative it
// keeps only the b-bit interval index of each element (bit-packed, ceil(n*b/8) bytes), and backward
// multiplies grad_out by the table level of that interval. Derivatives that take two values (relu,
// leaky_relu, relu6) and boolean masks (dropout, Need::Mask) are kept as exact 1-bit masks, so
// their gradients are bit-identical to the FP32 store's.
//
// What it is handed: forward_and_save(x) always indexes x, in one pass that also writes f(x).
// save(t) for a Derivative follows the FP32 convention of the default forward_and_save: t is
// y = f(x) where fn->derivative_from_output is set (sigmoid, tanh, relu), x otherwise; y is then
// indexed with the table's borders mapped through f (f must be increasing there), which selects
// the same interval as x up to float rounding at a border.
//
// The codec (make and read the codes, CPU kernels, device dispatch) is quant/fewbit/fewbit_codec.h; the
// bookkeeping (entries, dedup, the in-place check, describe) quant/store/compressing_store.h's. A GPU
// tensor is encoded and decoded on its device (quant/cuda/fewbit_codec_cuda.cu, the CPU's codes), its
// codes held there under the Saved tag; backward's grad * level[code] is one pass there too.
//
// Config: `{ops: [gelu], scheme: fewbit, bits: 3, weight: uniform, refine: true}`.
#include <cstdint>
#include <memory>

#include "autograd/saved_tensor_store.h"
#include "quant/store/compressing_store.h"
#include "quant/fewbit/fewbit_codec.h"
#include "quant/fewbit/fewbit_table.h"
#include "quant/policy/scheme_options.h"

namespace packrat {

struct FewbitStoreOptions {
  int bits = 3;                 // 1..4 for continuous derivatives; masks are always 1 bit
  FewbitTableOptions table;     // weight and refinement of the tables (default: the shipped ones)
};

class FewbitStore : public CompressingStore {
 public:
  explicit FewbitStore(FewbitStoreOptions o = {});
  std::string_view scheme() const override { return "fewbit"; }
  // Need::Derivative of a pointwise fn, and Need::Mask; never an `exact` request.
  bool accepts(const SaveRequest& r) const override;

  SavedHandle save(const Tensor& x, const SaveRequest& r) override;  // f32 q(x) / u8 0/1 back from load
  std::pair<Tensor, SavedHandle> forward_and_save(const Tensor& x, const SaveRequest& r) override;

  const FewbitStoreOptions& options() const { return options_; }

  // How an element's code is made and what it means in backward (quant/fewbit/fewbit_codec.h).
  using Kind = FewbitKind;
  using Coder = FewbitCoder;

 protected:
  // The codec: every request it accepts is encoded (never exact, never the base's step masks).
  Form form_for(const Tensor& x, const SaveRequest& r) const override;
  std::pair<const Pointwise*, int> codec_key(const SaveRequest& r) const override;
  std::unique_ptr<Encoded> encode(const Tensor& x, const SaveRequest& r) override;
  Tensor decode(const Encoded& enc, const Entry& e) override;
  Tensor apply_encoded(const Encoded& enc, const Entry& e, const Tensor& grad_out) override;
  bool codec_on_devices() const override { return true; }  // quant/fewbit/fewbit_codec.h's entry points

 private:
  struct Codes;  // the Encoded of one tensor
  Coder coder_for(const SaveRequest& r, bool from_output) const;

  FewbitStoreOptions options_;
};

// The config factory. Keys: bits (1..4, default 3), weight (uniform|normal), refine (true|false).
std::unique_ptr<SavedTensorStore> make_fewbit_store(SchemeOptions& o);

}  // namespace packrat
