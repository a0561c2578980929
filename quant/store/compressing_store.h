#pragma once
// The shared base of the compressing stores (per-group, mixed / deterministic, few-bit, and a
// scheme of your own): the bookkeeping every scheme needs, written once, so that a new scheme is
// its codec plus a name.
//
// The base owns:
//   the entry table      one entry per handle, in the order of saving; load / release /
//                        apply_derivative of a released handle is an error naming the store
//   dedup                a buffer saved twice in the same form (same storage, same version, same
//                        element count, same form, function and codec variant) is encoded once
//                        and counted once; the second entry is `shared`. So is a buffer this store
//                        decoded from a held encoding (a Value load, as a recompute loads its
//                        segment's input), saved again unmodified in that encoding's form: its
//                        values are the encoding's, so the entry shares it (no second encoding,
//                        and no second rounding of values already on the codec's grid)
//   the in-place check   loading a buffer modified in place after its save is an error
//   exact pass-through   exact requests, and what the scheme can neither encode nor pack, go
//                        to an inner FP32 store (a reference, tagged Saved while held)
//   step masks           the derivative of a step function (relu family) as its exact 1-bit mask
//                        (the few-bit codec's Step code); apply_derivative reads it in one pass
//   packed masks/indices masks and indices packed exactly at their bits
//   describe()           one SavedRecord per entry, bytes as the allocator counts them
//   the device           a buffer is kept on its own device (codes, masks and metadata allocated
//                        there under MemTag::Saved, by the codecs' device kernels; loads return
//                        tensors on that device, with no host access) when the codec says it runs
//                        there (codec_on_devices); otherwise a device tensor is a clear error
//
// Your own scheme: a codec (a way of keeping an f32 tensor in fewer bytes) derives from this
// class and supplies
//   scheme()             its name, as configs write it and the memory report shows it
//   encode()             what it keeps of an f32 Value or Derivative: an Encoded holding packrat
//                        Tensors allocated under MemTag::Saved
//   values() or decode() what it gives back: values() x itself (the base's decode gives x or
//                        f'(x), its apply_encoded grad * f'(x) in one pass); decode() instead,
//                        with apply_encoded(), for codes that are not x's values (a table index)
// and optionally a fused apply_encoded, its own routing (form_for), codec_key and
// codec_on_devices (each documented below). The base calls them under its lock (mutex()).
// examples/my_scheme/main.cpp walks through one: bfloat16, encode() and values() alone.
// Derive from SavedTensorStore (autograd/saved_tensor_store.h) only for a store that is not a
// codec (one that offloads to disk, say): it then implements scheme, save, load, release,
// describe and live_count, and whatever of the list above it needs, itself.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "autograd/fp32_store.h"
#include "autograd/saved_tensor_store.h"
#include "quant/fewbit/fewbit_codec.h"

namespace packrat {

class CompressingStore : public SavedTensorStore {
 public:
  // Rules that differ between the schemes (each keeps what it did before the base existed).
  struct Rules {
    int max_packed_bits = 8;        // masks and indices are packed up to this many bits (<= 16)
    bool unfit_kept_exact = false;  // a mask / index that is not integer or does not fit its bits:
                                    // kept exact (true) or an error naming the element (false)
    bool realised_bits = false;     // describe's bits: 8 * held bytes / numel (true), or the
                                    // nominal width (false)
  };
  explicit CompressingStore(Rules rules) : rules_(rules) {}

  SavedHandle save(const Tensor& x, const SaveRequest& r) override;
  Tensor load(const SavedHandle& h) override;
  // A Value held by the codec: values_in(dtype); otherwise load(h).to(dtype).
  Tensor load_in(const SavedHandle& h, DType dtype) override;
  void release(const SavedHandle& h) override;
  Tensor apply_derivative(const SavedHandle& h, const Tensor& grad_out) override;
  // The default y = f(x) then save, after the device check (nothing is made on a device
  // without kernels).
  std::pair<Tensor, SavedHandle> forward_and_save(const Tensor& x, const SaveRequest& r) override;
  void describe(std::vector<SavedRecord>& out) const override;
  size_t live_count() const override;
  void payload(const SavedHandle& h, std::vector<PayloadSlot>& out) override;

 protected:
  // What a codec keeps of one buffer: a derived struct holding its Tensors, allocated under
  // MemTag::Saved on the saved tensor's device (so that the allocator, and the memory report,
  // counts them); freed when its last entry is released.
  struct Encoded {
    virtual ~Encoded() = default;
    // Every Tensor it holds (undefined ones are skipped): what describe() counts and what the
    // offload layer moves to host memory and back between the save and the load. Required.
    virtual void payload(std::vector<PayloadSlot>& out) = 0;
    int64_t bytes() const;  // as the allocator counts them: the payload's allocations' bytes()
    int bits = 0;           // nominal bits per element, for describe()
  };
  enum class Form : uint8_t { Exact, Codec, StepMask, Packed };
  struct Key {
    const Storage* storage;
    Form form;
    const Pointwise* fn;  // StepMask: the function; Codec: as the codec's key says
    int variant;          // Packed: the bits; Codec: as the codec's key says
    auto operator<=>(const Key&) const = default;
  };
  struct Held {  // one kept form of one buffer, however many entries refer to it
    Key key{};
    std::weak_ptr<Storage> source;  // the buffer saved: the in-place check and dedup
    uint64_t source_id = 0;         // its storage id
    int64_t version = 0;
    int64_t numel = 0;
    std::unique_ptr<Encoded> encoded;  // Codec
    Tensor bits;                       // StepMask, Packed: (packed_bytes(numel, bits),) u8
    int packed_bits = 0;               // StepMask: 1; Packed: the bits
    float lo = 0, hi = 0;              // StepMask: f' where the bit is 0 / 1
    int refs = 0;
    std::vector<const Storage*> decodes;  // its Value loads' buffers (keys of decodes_)
    int64_t bytes() const { return encoded ? encoded->bytes() : static_cast<int64_t>(bits.storage()->allocation->bytes()); }
  };
  struct Entry {
    uint64_t held = 0;  // 0 for an exact entry
    SaveRequest request;
    Shape shape;
    DType dtype = DType::f32;
    Layout layout = Layout::Plain;
    bool shared = false;    // not the first entry of its held buffer
    SavedHandle exact;      // valid: kept by the inner FP32 store
    uint64_t fp32_key = 0;  // storage id of what the FP32 store would hold
  };

  // ---- the codec ----
  // Encodes an f32 Value or Derivative request that form_for sends to Form::Codec: the tensor
  // as handed to save() (any layout; y = f(x) where r.fn->derivative_from_output), once per
  // buffer however many ops save it, after check_device. Required. A 16-bit tensor (autocast)
  // arrives converted to f32 unless encodes_16bit().
  virtual std::unique_ptr<Encoded> encode(const Tensor& x, const SaveRequest& r) = 0;
  // Whether encode() takes bf16 and f16 tensors as they are (its codec reads them, with the codes
  // of their f32 values). Default false.
  virtual bool encodes_16bit() const { return false; }
  // What e.request.need asks for, from what encode kept (sets its own TagScope). Default: from
  // values(), x itself, or f'(x) for a Derivative.
  virtual Tensor decode(const Encoded& enc, const Entry& e);
  // The saved tensor's values, decoded (its shape and layout, a Workspace tensor), for a codec
  // that keeps x itself for Value and Derivative requests alike. Default: an error (a codec that
  // overrides decode and apply_encoded needs none).
  virtual Tensor values(const Encoded& enc, const Entry& e);
  // The same in `dtype` (load_in: a 16-bit kernel's input), the values values(enc, e).to(dtype)
  // gives. Default: exactly that; a codec may write the dtype directly.
  virtual Tensor values_in(const Encoded& enc, const Entry& e, DType dtype);
  // grad_out * f'(x) fused from the codes; an undefined Tensor: grad_out * load(h). Default: for
  // a Derivative, one pointwise_backward pass over values(), with no f'(x) tensor.
  virtual Tensor apply_encoded(const Encoded& enc, const Entry& e, const Tensor& grad_out);
  // How a request is held. Default: exact requests and what can be neither encoded nor packed
  // -> Exact; a step derivative -> StepMask; other f32 Values and Derivatives -> Codec; masks
  // and indices -> Packed at their bits (see Rules).
  virtual Form form_for(const Tensor& x, const SaveRequest& r) const;
  // Whether encode / decode / apply_encoded run on any device: they allocate on the tensor's
  // device and call only device-dispatching codec entry points, never host access to its data.
  // Default false: a device tensor is refused by check_device before anything is made there (a
  // scheme of your own, unless it says so; the built-in stores all say true).
  virtual bool codec_on_devices() const;
  // The fn and variant of a Codec key: two requests with the same key share one encoding.
  // Default: {nullptr, 0} (the codes depend on the buffer only).
  virtual std::pair<const Pointwise*, int> codec_key(const SaveRequest& r) const;

  // For derived stores: encodes x (the input of a fused pointwise forward) with `enc` already
  // made, and registers an entry whose in-place check and fp32_key follow `fp32_of` (what the
  // FP32 store would hold). The codec key takes `variant`.
  SavedHandle keep_encoded(const Tensor& x, const Tensor& fp32_of, const SaveRequest& r,
                           std::unique_ptr<Encoded> enc, int variant);
  // Unless x is on the CPU or the codec runs on devices (codec_on_devices), throws "<scheme>:
  // this scheme's codec has no GPU kernels, so nothing is compressed on cuda:0: <op> <layer>
  // <x.describe()> cannot be compressed there ..." (quant/codec/codec_kernels.h).
  void check_device(const Tensor& x, const SaveRequest& r) const;
  // The held buffer of a live, non-exact handle (no in-place check), or null.
  const Held* held_of(const SavedHandle& h) const;
  // When save(x, r) would share an encoding because x is a buffer this store decoded from it
  // (see dedup above): the storage id of the buffer that encoding was made from; otherwise 0.
  uint64_t decoded_from(const Tensor& x, const SaveRequest& r) const;
  std::recursive_mutex& mutex() const { return mutex_; }

 private:
  const Entry& entry(const SavedHandle& h) const;  // throws for a released handle
  const Held& checked(const Entry& e) const;       // throws when modified in place
  Key key_for(const Tensor& x, const SaveRequest& r, Form form) const;  // how save(x, r) keys its held form
  uint64_t find_held(const Key& k, const Tensor& x) const;
  // The held encoding x was decoded from (a live decode, unmodified, of an encoding in k's form
  // and codec key), or 0.
  uint64_t find_decoded(const Key& k, const Tensor& x) const;
  // Records `out` as a decode of held buffer `held` (a Value load); returns it.
  Tensor remember_decode(uint64_t held, Tensor out);
  uint64_t keep(Held h, const Tensor& source);
  SavedHandle add_entry(uint64_t held, const Tensor& x, const SaveRequest& r, bool shared, uint64_t fp32_key);
  SavedHandle keep_exact(const Tensor& x, const SaveRequest& r);
  // The few-bit codec's Step coder of a held step mask (its codes are the mask).
  static FewbitCoder step_coder(const Held& h);
  void pack_step_mask(Held& h, const Tensor& x);
  bool pack_exact(Held& h, const Tensor& x, const SaveRequest& r, int bits);  // false: unfit, keep exact
  Tensor load_step_mask(const Held& h, const Entry& e) const;
  Tensor load_packed(const Held& h, const Entry& e) const;

  Rules rules_;
  mutable std::recursive_mutex mutex_;
  Fp32Store exact_;
  std::map<uint64_t, Held> held_;
  std::map<Key, uint64_t> by_key_;     // latest held buffer per key
  struct Decode {                      // a buffer a Value load returned
    uint64_t held = 0;
    std::weak_ptr<Storage> buffer;
    int64_t version = 0;
  };
  std::map<const Storage*, Decode> decodes_;  // by the decoded buffer; dropped with their held buffer
  std::map<uint64_t, Entry> entries_;  // by handle id: the order of saving
  uint64_t next_id_ = 1, next_held_ = 1;
};

}  // namespace packrat
