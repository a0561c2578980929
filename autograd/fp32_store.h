#pragma once
// The baseline store: keeps a reference to exactly what PyTorch keeps (no copy), moves its
// bytes to the Saved tag while held, and keeps a tensor saved by two ops only once.
#include <mutex>
#include <map>
#include <unordered_map>

#include "autograd/saved_tensor_store.h"

namespace packrat {

class Fp32Store : public SavedTensorStore {
 public:
  std::string_view scheme() const override { return "fp32"; }
  SavedHandle save(const Tensor& x, const SaveRequest& r) override;
  Tensor load(const SavedHandle& h) override;
  void release(const SavedHandle& h) override;
  // grad_out * f'(x) in one pass (f' computed chunk by chunk in a small stack buffer).
  Tensor apply_derivative(const SavedHandle& h, const Tensor& grad_out) override;
  void describe(std::vector<SavedRecord>& out) const override;
  size_t live_count() const override { return entries_.size(); }
  // The tensor held, which goes back to its own tag when the offload layer moves a copy out.
  void payload(const SavedHandle& h, std::vector<PayloadSlot>& out) override;

 private:
  struct Held {  // one buffer, however many handles refer to it
    Tensor tensor;  // the buffer saved, or the offload layer's copy of it (another storage)
    MemTag original_tag;
    int refs = 0;
  };
  struct Entry {
    uint64_t key;  // the saved buffer's storage id (ids are never reused; addresses are)
    int64_t version;
    SaveRequest request;
    Shape shape;
    DType dtype;
    Layout layout;
    bool shared;  // not the first handle to its buffer
  };
  const Tensor& checked(const Entry& e) const;  // the held tensor, after the in-place check
  std::unordered_map<uint64_t, Held> held_;  // by the saved buffer's storage id
  std::map<uint64_t, Entry> entries_;  // by id: the order of saving
  uint64_t next_id_ = 1;
};

class Fp32Policy : public StorePolicy {
 public:
  SavedTensorStore& store_for(const SaveRequest&) override { return store_; }
  std::vector<SavedTensorStore*> stores() override { return {&store_}; }

 private:
  Fp32Store store_;
};

// f'(x) (or f'(x) from y) over a saved f32 tensor, same shape and layout.
Tensor pointwise_derivative(const Pointwise& fn, const Tensor& saved);
// grad_out * f'(saved) in one pass (the backend's pointwise_backward), in saved's layout; the
// product pointwise_derivative then a multiply give, without the f' tensor between them.
Tensor pointwise_backward(const Pointwise& fn, const Tensor& saved, const Tensor& grad_out);

}  // namespace packrat
