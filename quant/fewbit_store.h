#pragma once
// The few-bit store (papers/fewbit-backward.md, Alg. 1): for an activation's Need::Derivative it
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
// Config: `{ops: [gelu], scheme: fewbit, bits: 3, weight: uniform, refine: true}`.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "autograd/saved_tensor_store.h"
#include "quant/fewbit_table.h"
#include "quant/scheme_options.h"

namespace packrat {

struct FewbitStoreOptions {
  int bits = 3;                 // 1..4 for continuous derivatives; masks are always 1 bit
  FewbitTableOptions table;     // weight and refinement of the tables (default: the shipped ones)
};

class FewbitStore : public SavedTensorStore {
 public:
  explicit FewbitStore(FewbitStoreOptions o = {});
  std::string_view scheme() const override { return "fewbit"; }
  // Need::Derivative of a pointwise fn, and Need::Mask; never an `exact` request.
  bool accepts(const SaveRequest& r) const override;

  SavedHandle save(const Tensor& x, const SaveRequest& r) override;
  Tensor load(const SavedHandle& h) override;  // f32 q(x) for a Derivative, u8 0/1 for a Mask
  void release(const SavedHandle& h) override;
  std::pair<Tensor, SavedHandle> forward_and_save(const Tensor& x, const SaveRequest& r) override;
  Tensor apply_derivative(const SavedHandle& h, const Tensor& grad_out) override;
  void describe(std::vector<SavedRecord>& out) const override;
  size_t live_count() const override;

  const FewbitStoreOptions& options() const { return options_; }

  // How an element's code is made and what it means in backward.
  enum class Kind : uint8_t { Table, Step, Mask };
  struct Coder {
    Kind kind = Kind::Table;
    int bits = 1;
    FewbitLut lut;          // Table: interval lookup (on x, or on y when from_output)
    float step_hi = 1.0f;   // Step: code 1 where f'(x) == step_hi; levels in lut.levels[0..1]
    bool from_output = false;  // the tensor indexed is y = f(x)
  };

 private:
  struct Entry {
    Coder coder;
    Tensor packed;  // (packed_bytes(numel, bits),) u8, tagged Saved
    SaveRequest request;
    Shape shape;
    Layout layout;
    uint64_t fp32_key = 0;  // storage id of what the FP32 store would hold (x, or y = f(x))
  };
  Coder coder_for(const SaveRequest& r, bool from_output) const;
  SavedHandle keep(Entry e);
  const Entry& entry(const SavedHandle& h) const;

  FewbitStoreOptions options_;
  mutable std::mutex mutex_;
  std::map<uint64_t, Entry> entries_;  // by id: the order of saving
  uint64_t next_id_ = 1;
};

// The config factory. Keys: bits (1..4, default 3), weight (uniform|normal), refine (true|false).
std::unique_ptr<SavedTensorStore> make_fewbit_store(SchemeOptions& o);

}  // namespace packrat
