#pragma once
// A saved-tensor store with the offload layer under it: every call goes to the store it wraps,
// and the Offloader (autograd/offload/offloader.h) moves the payload of each handle it saves to
// host memory and back around the store's reads. The policy hands it out instead of the store
// (RulePolicy with an OffloadRule); its handles are its own, mapped to the wrapped store's (which
// may be a sub-store: Fp32BatchnormStore routes), so that loads and releases come here first.
#include <memory>
#include <unordered_map>

#include "autograd/offload/offloader.h"
#include "autograd/saved_tensor_store.h"

namespace packrat {

class OffloadingStore final : public SavedTensorStore {
 public:
  OffloadingStore(SavedTensorStore& inner, Offloader& offloader) : inner_(inner), offloader_(offloader) {}
  SavedTensorStore& inner() { return inner_; }

  std::string_view scheme() const override { return inner_.scheme(); }
  bool accepts(const SaveRequest& r) const override { return inner_.accepts(r); }
  SavedHandle save(const Tensor& x, const SaveRequest& r) override;
  std::pair<Tensor, SavedHandle> forward_and_save(const Tensor& x, const SaveRequest& r) override;
  Tensor load(const SavedHandle& h) override;
  Tensor load_in(const SavedHandle& h, DType dtype) override;
  Tensor apply_derivative(const SavedHandle& h, const Tensor& grad_out) override;
  void release(const SavedHandle& h) override;
  void payload(const SavedHandle& h, std::vector<PayloadSlot>& out) override;
  void prefetch(const SavedHandle& h, int distance) override;
  void note_backward(const SavedHandle& h, const std::vector<Tensor>& grad_outputs) override;
  // The wrapped store's records, state and adaptation: the policy's stores() lists it, not this.
  void describe(std::vector<SavedRecord>& out) const override { inner_.describe(out); }
  size_t live_count() const override { return inner_.live_count(); }

 private:
  SavedHandle wrap(const SavedHandle& inner, const SaveRequest& r);
  const SavedHandle& unwrap(const SavedHandle& h) const;  // throws for a released handle

  SavedTensorStore& inner_;
  Offloader& offloader_;
  std::unordered_map<uint64_t, SavedHandle> handles_;  // ours -> the wrapped store's
  uint64_t next_id_ = 1;
};

}  // namespace packrat
