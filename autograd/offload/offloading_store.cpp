#include "autograd/offload/offloading_store.h"

#include "core/error.h"

namespace packrat {

SavedHandle OffloadingStore::wrap(const SavedHandle& inner, const SaveRequest& r) {
  const uint64_t id = next_id_++;
  handles_.emplace(id, inner);
  offloader_.saved(inner, r);
  return {this, id};
}

const SavedHandle& OffloadingStore::unwrap(const SavedHandle& h) const {
  auto it = handles_.find(h.id);
  PACKRAT_CHECK(it != handles_.end(), "{} store (offloaded): saved tensor {} was already released (a second backward?)",
                inner_.scheme(), h.id);
  return it->second;
}

SavedHandle OffloadingStore::save(const Tensor& x, const SaveRequest& r) { return wrap(inner_.save(x, r), r); }

std::pair<Tensor, SavedHandle> OffloadingStore::forward_and_save(const Tensor& x, const SaveRequest& r) {
  auto [y, h] = inner_.forward_and_save(x, r);
  return {std::move(y), wrap(h, r)};
}

Tensor OffloadingStore::load(const SavedHandle& h) {
  const SavedHandle& in = unwrap(h);
  offloader_.ready(in);
  return in.store->load(in);
}

Tensor OffloadingStore::load_in(const SavedHandle& h, DType dtype) {
  const SavedHandle& in = unwrap(h);
  offloader_.ready(in);
  return in.store->load_in(in, dtype);
}

Tensor OffloadingStore::apply_derivative(const SavedHandle& h, const Tensor& grad_out) {
  const SavedHandle& in = unwrap(h);
  offloader_.ready(in);
  return in.store->apply_derivative(in, grad_out);
}

void OffloadingStore::release(const SavedHandle& h) {
  auto it = handles_.find(h.id);
  if (it == handles_.end()) return;
  const SavedHandle in = it->second;
  handles_.erase(it);
  offloader_.release(in);  // before the store frees what its payload slots point into
  in.store->release(in);
}

void OffloadingStore::payload(const SavedHandle& h, std::vector<PayloadSlot>& out) {
  const SavedHandle& in = unwrap(h);
  in.store->payload(in, out);
}

void OffloadingStore::prefetch(const SavedHandle& h, int distance) {
  auto it = handles_.find(h.id);
  if (it != handles_.end()) offloader_.prefetch(it->second, distance);
}

void OffloadingStore::note_backward(const SavedHandle& h, const std::vector<Tensor>& grad_outputs) {
  const SavedHandle& in = unwrap(h);
  in.store->note_backward(in, grad_outputs);
}

}  // namespace packrat
