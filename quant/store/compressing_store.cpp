#include "quant/store/compressing_store.h"

#include <fmt/format.h>

#include "core/autocast.h"
#include "core/backend.h"
#include "core/error.h"
#include "quant/bits/bitpack.h"
#include "quant/bits/wide_codes.h"  // masks and indices above 8 bits
#include "quant/codec/codec_kernels.h"
#include "quant/fewbit/fewbit_codec.h"
#include "quant/store/with_integers.h"

namespace packrat {

namespace {

bool integer_dtype(DType d) { return d == DType::u8 || d == DType::i32 || d == DType::i64; }

template <typename T, typename C>
void copy_values(const T* x, int64_t n, C* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<C>(x[i]);
}

// out (n integers, u8, i32 or i64) = codes.
template <typename C>
void copy_to(const C* codes, int64_t n, const Tensor& out) {
  switch (out.dtype()) {
    case DType::u8: copy_values(codes, n, out.data<uint8_t>()); break;
    case DType::i32: copy_values(codes, n, out.data<int32_t>()); break;
    default: copy_values(codes, n, out.data<int64_t>()); break;
  }
}

}  // namespace

// ---- routing --------------------------------------------------------------------------------

CompressingStore::Form CompressingStore::form_for(const Tensor& x, const SaveRequest& r) const {
  // 16-bit values (autocast) are encoded from their exact f32 values: the same codes as f32 input.
  const bool encodable = (r.need == Need::Value || r.need == Need::Derivative) && is_f32_or_half(x.dtype());
  const int bits = r.need == Need::Mask ? 1 : r.need == Need::Index ? static_cast<int>(r.index_bits) : 0;
  const bool packable =
      bits >= 1 && bits <= rules_.max_packed_bits && (!rules_.unfit_kept_exact || integer_dtype(x.dtype()));
  if (r.exact || (!encodable && !packable)) return Form::Exact;
  if (encodable) return r.need == Need::Derivative && r.fn->derivative_is_step ? Form::StepMask : Form::Codec;
  return Form::Packed;
}

std::pair<const Pointwise*, int> CompressingStore::codec_key(const SaveRequest&) const { return {nullptr, 0}; }

Tensor CompressingStore::values(const Encoded&, const Entry& e) {
  fail("{} {}: the {} codec implements neither decode nor values", e.request.op, e.request.name, scheme());
}

Tensor CompressingStore::values_in(const Encoded& enc, const Entry& e, DType dtype) {
  const Tensor x = values(enc, e);
  return x.dtype() == dtype ? x : x.to(dtype);
}

Tensor CompressingStore::decode(const Encoded& enc, const Entry& e) {
  TagScope tag(MemTag::Workspace);  // a transient copy for the backward of one op, freed after it
  const Tensor x = values(enc, e);
  return e.request.need == Need::Derivative ? pointwise_derivative(*e.request.fn, x) : x;
}

Tensor CompressingStore::apply_encoded(const Encoded& enc, const Entry& e, const Tensor& grad_out) {
  if (e.request.need != Need::Derivative || grad_out.dtype() != DType::f32) return Tensor();
  return pointwise_backward(*e.request.fn, values(enc, e), grad_out);
}

// ---- the entry table ------------------------------------------------------------------------

const CompressingStore::Entry& CompressingStore::entry(const SavedHandle& h) const {
  auto it = entries_.find(h.id);
  PACKRAT_CHECK(it != entries_.end(), "{} store: saved tensor {} was already released (a second backward?)", scheme(),
                h.id);
  return it->second;
}

const CompressingStore::Held& CompressingStore::checked(const Entry& e) const {
  const Held& h = held_.at(e.held);
  if (auto src = h.source.lock(); src && src->version != h.version)
    fail("{} {}: a tensor saved for backward was modified in place after it was saved (version {}, saved at {}); "
         "use an out-of-place op",
         e.request.op, e.request.name, src->version, h.version);
  return h;
}

const CompressingStore::Held* CompressingStore::held_of(const SavedHandle& h) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(h.id);
  if (it == entries_.end() || it->second.exact.valid()) return nullptr;
  return &held_.at(it->second.held);
}

CompressingStore::Key CompressingStore::key_for(const Tensor& x, const SaveRequest& r, Form form) const {
  Key key{x.storage().get(), form, nullptr, 0};
  if (form == Form::Codec) std::tie(key.fn, key.variant) = codec_key(r);
  if (form == Form::StepMask) key.fn = r.fn;
  if (form == Form::Packed) key.variant = r.need == Need::Mask ? 1 : static_cast<int>(r.index_bits);  // the bits
  return key;
}

uint64_t CompressingStore::find_held(const Key& k, const Tensor& x) const {
  auto it = by_key_.find(k);
  if (it == by_key_.end()) return 0;
  const Held& h = held_.at(it->second);
  // The same live buffer at the same version: not a new tensor at a recycled address.
  if (h.source.lock() != x.storage() || h.version != x.version() || h.numel != x.numel()) return 0;
  return it->second;
}

uint64_t CompressingStore::find_decoded(const Key& k, const Tensor& x) const {
  auto it = decodes_.find(x.storage().get());
  if (it == decodes_.end()) return 0;
  const Decode& d = it->second;
  if (d.buffer.lock() != x.storage() || d.version != x.version()) return 0;  // freed, or modified since
  const Held& h = held_.at(d.held);
  if (h.numel != x.numel() || h.key.form != k.form || h.key.fn != k.fn || h.key.variant != k.variant) return 0;
  return d.held;
}

uint64_t CompressingStore::decoded_from(const Tensor& x, const SaveRequest& r) const {
  std::lock_guard lock(mutex_);
  const Form form = form_for(x, r);
  if (form != Form::Codec) return 0;
  const Key key = key_for(x, r, form);
  if (find_held(key, x) != 0) return 0;  // x itself is held: ordinary dedup
  const uint64_t held = find_decoded(key, x);
  return held ? held_.at(held).source_id : 0;
}

Tensor CompressingStore::remember_decode(uint64_t held, Tensor out) {
  Held& h = held_.at(held);
  const Storage* buffer = out.storage().get();
  decodes_[buffer] = Decode{held, out.storage(), out.version()};
  h.decodes.push_back(buffer);
  return out;
}

uint64_t CompressingStore::keep(Held h, const Tensor& source) {
  h.source = source.storage();
  h.source_id = source.storage()->id;
  h.version = source.version();
  h.numel = source.numel();
  const uint64_t id = next_held_++;
  by_key_[h.key] = id;
  held_.emplace(id, std::move(h));
  return id;
}

SavedHandle CompressingStore::add_entry(uint64_t held, const Tensor& x, const SaveRequest& r, bool shared,
                                        uint64_t fp32_key) {
  ++held_.at(held).refs;
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{held, r, x.shape(), x.dtype(), x.layout(), shared, SavedHandle{}, fp32_key});
  return {this, id};
}

SavedHandle CompressingStore::keep_exact(const Tensor& x, const SaveRequest& r) {
  // Kept in f32 by exact_ (and counted by it); the handle stays ours so that any caller can load it.
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{0, r, x.shape(), x.dtype(), x.layout(), false, exact_.save(x, r), x.storage()->id});
  return {this, id};
}

// ---- save -------------------------------------------------------------------------------------

SavedHandle CompressingStore::save(const Tensor& x, const SaveRequest& r) {
  PACKRAT_CHECK(x.defined(), "{} store {} {}: cannot save an undefined tensor", scheme(), r.op, r.name);
  PACKRAT_CHECK(r.need != Need::Derivative || r.fn != nullptr, "{} {}: a derivative request needs its pointwise function",
                r.op, r.name);
  std::lock_guard lock(mutex_);
  const Form form = form_for(x, r);
  if (form == Form::Exact) return keep_exact(x, r);
  check_device(x, r);
  const Key key = key_for(x, r, form);
  uint64_t held = find_held(key, x);
  if (held == 0 && form == Form::Codec) held = find_decoded(key, x);
  const bool shared = held != 0;
  if (!shared) {
    Held h;
    h.key = key;
    switch (form) {
      case Form::Codec:
        h.encoded = encode(encodes_16bit() ? x : as_f32(x), r);
        break;
      case Form::StepMask:
        pack_step_mask(h, x);  // a 16-bit x's mask from its f32 values (fewbit_encode)
        break;
      default:
        if (!pack_exact(h, x, r, key.variant)) return keep_exact(x, r);  // unfit for its bits (variant)
        break;
    }
    held = keep(std::move(h), x);
  }
  return add_entry(held, x, r, shared, x.storage()->id);
}

bool CompressingStore::codec_on_devices() const { return false; }

void CompressingStore::check_device(const Tensor& x, const SaveRequest& r) const {
  if (x.is_cpu() || codec_on_devices()) return;
  check_codec_device(scheme(), x.device(),
                     fmt::format("{} {} {} cannot be compressed there (save it with the fp32 scheme, or run on the CPU)",
                                 r.op, r.name, x.describe()));
}

SavedHandle CompressingStore::keep_encoded(const Tensor& x, const Tensor& fp32_of, const SaveRequest& r,
                                           std::unique_ptr<Encoded> enc, int variant) {
  std::lock_guard lock(mutex_);
  Held h;
  h.key = Key{x.storage().get(), Form::Codec, codec_key(r).first, variant};
  h.encoded = std::move(enc);
  const uint64_t held = keep(std::move(h), fp32_of);
  return add_entry(held, x, r, false, fp32_of.storage()->id);
}

FewbitCoder CompressingStore::step_coder(const Held& h) {
  FewbitCoder c;
  c.kind = FewbitKind::Step;
  c.bits = 1;
  c.step_hi = h.hi;
  c.lut.levels[0] = h.lo;
  c.lut.levels[1] = h.hi;
  c.from_output = h.key.fn->derivative_from_output != nullptr;  // save() was handed y = f(x) then
  return c;
}

void CompressingStore::pack_step_mask(Held& h, const Tensor& x) {
  const Pointwise& fn = *h.key.fn;
  h.packed_bits = 1;
  h.lo = fn.df(-1.0f);  // the two values a step derivative takes (relu: 0, 1; leaky_relu: slope, 1)
  h.hi = fn.df(1.0f);
  h.bits = Tensor::empty(Shape{packed_bytes(x.numel(), 1)}, DType::u8, Layout::Plain, MemTag::Saved,
                         x.device());  // (ceil(n / 8),)
  // The few-bit codec's step code is this mask: [f'(x) == hi] from the activation's own f' (from
  // y where fn->derivative_from_output is set), one pass on x's device.
  fewbit_encode(step_coder(h), &fn, x, Tensor(), h.bits);
}

bool CompressingStore::pack_exact(Held& h, const Tensor& x, const SaveRequest& r, int bits) {
  const int64_t n = x.numel(), limit = int64_t{1} << bits;
  if (!integer_dtype(x.dtype())) {
    if (rules_.unfit_kept_exact) return false;
    fail("{} {}: a {} request must hold integers (u8, i32, i64), got {}", r.op, r.name, need_name(r.need),
         dtype_name(x.dtype()));
  }
  auto unfit = [&](int64_t bad) {
    if (rules_.unfit_kept_exact) return false;
    fail("{} {}: {} element {} does not fit in {} bit(s) (a {} request must hold values in [0, {}))", r.op, r.name,
         need_name(r.need), bad, bits, need_name(r.need), limit);
  };
  h.packed_bits = bits;
  h.bits = Tensor::empty(Shape{packed_bytes(n, bits)}, DType::u8, Layout::Plain, MemTag::Saved,
                         x.device());  // (ceil(n * bits / 8),)
  if (bits > 8) {  // 16-bit codes, mixed_quant's wide layout, packed on the host: only the mixed store
                   // packs above 8 bits, and only indices need it (targets of more than 256 classes:
                   // N values), so a tensor on a GPU makes the round trip
    const Tensor xs = x.to(Device::cpu());  // x itself on the CPU
    int64_t bad = -1;
    with_integers(xs, [&](const auto* p) {
      for (int64_t i = 0; i < n && bad < 0; ++i)
        if (static_cast<int64_t>(p[i]) < 0 || static_cast<int64_t>(p[i]) >= limit) bad = i;
    });
    if (bad >= 0) return unfit(bad);
    std::vector<uint16_t> codes(static_cast<size_t>(n));  // (n,)
    with_integers(xs, [&](const auto* p) { copy_values(p, n, codes.data()); });
    if (x.is_cpu()) {
      pack_wide_codes(codes.data(), n, bits, h.bits.data<uint8_t>());
    } else {
      Tensor packed = Tensor::empty(h.bits.shape(), DType::u8, Layout::Plain, MemTag::Workspace, Device::cpu());
      pack_wide_codes(codes.data(), n, bits, packed.data<uint8_t>());
      backend(x.device()).copy(packed, h.bits);
    }
    return true;
  }
  // On x's device, in one pass; a GPU reports whether every value fit with one host read.
  const int64_t bad = pack_codes(x, bits, h.bits);
  return bad < 0 || unfit(bad);
}

// ---- load ---------------------------------------------------------------------------------------

Tensor CompressingStore::load_step_mask(const Held& h, const Entry& e) const {
  Tensor out = Tensor::empty(e.shape, DType::f32, e.layout, TagScope::current(),
                             h.bits.device());  // f'(x), the saved tensor's shape and layout
  fewbit_decode(step_coder(h), h.bits, Tensor(), out);
  return out;
}

Tensor CompressingStore::load_packed(const Held& h, const Entry& e) const {
  const int bits = h.packed_bits;
  Tensor out = Tensor::empty(e.shape, e.dtype, e.layout, TagScope::current(),
                             h.bits.device());  // the saved tensor's shape, dtype and layout
  if (bits > 8) {  // on the host, as in pack_exact
    const Tensor packed = h.bits.to(Device::cpu());
    std::vector<uint16_t> codes(static_cast<size_t>(h.numel));  // (n,)
    unpack_wide_codes(packed.data<uint8_t>(), h.numel, bits, codes.data());
    if (out.is_cpu()) {
      copy_to(codes.data(), h.numel, out);
      return out;
    }
    const Tensor host = Tensor::empty(e.shape, e.dtype, e.layout, TagScope::current(), Device::cpu());  // staged
    copy_to(codes.data(), h.numel, host);
    backend(out.device()).copy(host, out);
    return out;
  }
  unpack_codes(h.bits, bits, out);
  return out;
}

Tensor CompressingStore::load(const SavedHandle& handle) {
  std::lock_guard lock(mutex_);
  const Entry& e = entry(handle);
  if (e.exact.valid()) return exact_.load(e.exact);
  const Held& h = checked(e);
  if (h.encoded && e.request.need == Need::Value) return remember_decode(e.held, decode(*h.encoded, e));
  if (h.encoded) return decode(*h.encoded, e);
  TagScope tag(MemTag::Workspace);  // a transient copy for the backward of one op
  return h.key.form == Form::StepMask ? load_step_mask(h, e) : load_packed(h, e);
}

Tensor CompressingStore::load_in(const SavedHandle& handle, DType dtype) {
  {
    std::lock_guard lock(mutex_);
    const Entry& e = entry(handle);
    if (!e.exact.valid() && e.request.need == Need::Value) {
      const Held& h = checked(e);
      if (h.encoded) return remember_decode(e.held, values_in(*h.encoded, e, dtype));
    }
  }
  return SavedTensorStore::load_in(handle, dtype);
}

Tensor CompressingStore::apply_derivative(const SavedHandle& handle, const Tensor& grad_out) {
  {
    std::lock_guard lock(mutex_);
    const Entry& e = entry(handle);
    if (e.exact.valid()) return exact_.apply_derivative(e.exact, grad_out);
    const Held& h = checked(e);
    if (h.encoded) {
      Tensor fused = apply_encoded(*h.encoded, e, grad_out);
      if (fused.defined()) return fused;
    }
    if (h.key.form == Form::StepMask && grad_out.dtype() == DType::f32 && grad_out.layout() == e.layout) {
      // grad * f' straight from the mask, in one pass: the product the unfused path computes.
      PACKRAT_CHECK(grad_out.shape() == e.shape, "{} {}: backward gradient {} does not match the saved {}",
                    e.request.op, e.request.name, grad_out.shape().str(), e.shape.str());
      Tensor out = Tensor::empty_like(grad_out);
      fewbit_decode(step_coder(h), h.bits, grad_out, out);
      return out;
    }
  }
  return SavedTensorStore::apply_derivative(handle, grad_out);
}

std::pair<Tensor, SavedHandle> CompressingStore::forward_and_save(const Tensor& x, const SaveRequest& r) {
  if (x.defined() && r.fn && form_for(x, r) != Form::Exact) check_device(x, r);
  return SavedTensorStore::forward_and_save(x, r);
}

// ---- release, describe ------------------------------------------------------------------------

void CompressingStore::release(const SavedHandle& handle) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(handle.id);
  if (it == entries_.end()) return;
  if (it->second.exact.valid()) {
    exact_.release(it->second.exact);
    entries_.erase(it);
    return;
  }
  auto hit = held_.find(it->second.held);
  if (--hit->second.refs == 0) {
    if (auto k = by_key_.find(hit->second.key); k != by_key_.end() && k->second == hit->first) by_key_.erase(k);
    for (const Storage* buffer : hit->second.decodes)
      if (auto d = decodes_.find(buffer); d != decodes_.end() && d->second.held == hit->first) decodes_.erase(d);
    held_.erase(hit);
  }
  entries_.erase(it);
}

void CompressingStore::describe(std::vector<SavedRecord>& out) const {
  std::lock_guard lock(mutex_);
  for (const auto& [id, e] : entries_) {
    if (e.exact.valid()) continue;  // described by exact_ below
    const Held& h = held_.at(e.held);
    SavedRecord rec;
    rec.layer = e.request.name;
    rec.op = std::string(e.request.op);
    rec.scheme = std::string(scheme());
    rec.need = e.request.need;
    rec.numel = e.shape.numel();
    rec.shape = e.shape;
    rec.dtype = e.dtype;
    const int64_t bytes = h.bytes();
    rec.bits = rules_.realised_bits ? (h.numel ? 8.0 * static_cast<double>(bytes) / static_cast<double>(h.numel) : 0.0)
                                    : (h.encoded ? h.encoded->bits : h.packed_bits);
    rec.shared = e.shared;
    rec.exact = !h.encoded;  // a step mask, or a mask / index packed exactly
    rec.fp32_key = e.fp32_key;
    rec.bytes = e.shared ? 0 : bytes;
    rec.fp32_bytes = e.shared ? 0 : rec.numel * static_cast<int64_t>(dtype_size(e.dtype));
    rec.f32_bytes = is_half(e.dtype) ? 2 * rec.fp32_bytes : rec.fp32_bytes;
    out.push_back(std::move(rec));
  }
  exact_.describe(out);
}

int64_t CompressingStore::Encoded::bytes() const {
  std::vector<PayloadSlot> slots;
  const_cast<Encoded*>(this)->payload(slots);  // payload() only lists the tensors
  int64_t n = 0;
  for (const PayloadSlot& s : slots)
    if (s.tensor->defined()) n += static_cast<int64_t>(s.tensor->storage()->allocation->bytes());
  return n;
}

void CompressingStore::payload(const SavedHandle& h, std::vector<PayloadSlot>& out) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(h.id);
  if (it == entries_.end()) return;
  const Entry& e = it->second;
  if (e.exact.valid()) return exact_.payload(e.exact, out);
  Held& held = held_.at(e.held);
  if (held.encoded) held.encoded->payload(out);  // undefined tensors included: the offload layer skips them
  if (held.bits.defined()) out.push_back({&held.bits});
}

size_t CompressingStore::live_count() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace packrat
