#pragma once
// The "bf16" scheme of examples/my_scheme (its main.cpp says what the program does): a codec that
// keeps every f32 activation an op saves for backward as bfloat16, half the FP32 bytes. The
// tests check it as the base class's worked example (tests/quant/compressing_store_test.cpp).
//
// A scheme that is a codec, a way of keeping a tensor in fewer bytes, derives from
// CompressingStore (quant/store/compressing_store.h) and writes only that codec and a name: here
// encode() and values(). Everything else comes from the base, as it does for packrat's own
// schemes (actnn, mixed, fewbit):
//   - the entry table: save / load / release; using a released handle is an error naming the store
//   - dedup: a buffer two ops save in the same form is encoded once and counted once
//   - the in-place check: loading a buffer modified after its save is an error
//   - exact pass-through: exact requests (batchnorm statistics) stay FP32
//   - ReLU-family derivatives as exact 1-bit masks: f' of relu, leaky_relu or relu6 takes two
//     values, so their saves never reach encode() and cost 1 bit an element, not 16
//   - dropout masks and max-pool indices packed exactly at the bits they need
//   - describe(): the memory report's bytes, as the allocator counts them
// Derive from SavedTensorStore (autograd/saved_tensor_store.h) only for a store that is not a
// codec (one that offloads to disk, say): it then implements scheme, save, load, release,
// describe and live_count, and whatever of the above it needs, itself.
//
// CPU only: the codec below reads and writes the tensors on the host. It does not override
// codec_on_devices(), so the base refuses a GPU tensor before anything is made there, with
// "bf16: this scheme's codec has no GPU kernels, so nothing is compressed on cuda:0: ...".
// Running on a GPU would take a device kernel for the two loops (packrat has no bf16 dtype
// to convert with), after which codec_on_devices() may return true.
#include <cstdint>
#include <memory>

#include "quant/group/group_quant.h"    // f32_to_bf16, bf16_to_f32
#include "quant/policy/rule_policy.h"  // SchemeOptions
#include "quant/store/compressing_store.h"

namespace my_scheme {

using namespace packrat;

class Bf16Store : public CompressingStore {
 public:
  // Rules{}: masks and indices packed up to 8 bits, describe() reports the nominal bits.
  Bf16Store() : CompressingStore(Rules{}) {}

  // The name configs use and the memory report shows.
  std::string_view scheme() const override { return "bf16"; }

 protected:
  // What the codec keeps of one tensor. Its memory must be packrat tensors allocated under
  // MemTag::Saved, so that the allocator, and so the memory report, counts them.
  struct Codes : Encoded {
    Tensor bf16;  // (2 * numel,) u8: one bf16 per element, in the saved buffer's order
    // Every tensor it holds: the memory report counts their bytes, and memory.offload moves them.
    void payload(std::vector<PayloadSlot>& out) override { out.push_back({&bf16}); }
  };

  // Called for an f32 Value (a conv, linear or batchnorm input) or Derivative (f'(x) of a
  // pointwise op other than the relu family: x, or y = f(x) where the op saves its output).
  // x is already on the CPU: the base checked. Any layout: the codes follow the buffer as it
  // lies, element for element.
  std::unique_ptr<Encoded> encode(const Tensor& x, const SaveRequest&) override {
    auto c = std::make_unique<Codes>();
    c->bits = 16;  // for describe()
    c->bf16 = Tensor::empty({2 * x.numel()}, DType::u8, Layout::Plain, MemTag::Saved);
    const float* in = x.data<float>();
    auto* out = reinterpret_cast<uint16_t*>(c->bf16.data<uint8_t>());
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = f32_to_bf16(in[i]);
    return c;
  }

  // The saved tensor's values back, in its shape and layout, as a Workspace tensor (freed
  // after the op's backward). The base builds load() on this: x for a Value, f'(x) for a
  // Derivative; and apply_derivative(): grad * f'(x) in one pass, with no f'(x) tensor.
  Tensor values(const Encoded& enc, const Entry& e) override {
    const auto& c = static_cast<const Codes&>(enc);
    Tensor x = Tensor::empty(e.shape, DType::f32, e.layout, MemTag::Workspace);
    const auto* in = reinterpret_cast<const uint16_t*>(c.bf16.data<uint8_t>());
    float* out = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = bf16_to_f32(in[i]);
    return x;
  }

  // Not overridden, as this scheme needs none of them (quant/store/compressing_store.h):
  //   decode()           for a codec that keeps something other than x's values (a table index)
  //   apply_encoded()    grad * f'(x) fused with the decode, for speed
  //   form_for()         routing: which requests reach encode(), which are masks or stay FP32
  //   codec_key()        for codes that depend on the request, not only on the buffer
  //   codec_on_devices() see the top of this file
};

// The factory reads the scheme's options from the config (SchemeOptions' getters); this scheme
// has none, so any key written next to `scheme: bf16` is an error naming it (make_store checks
// that every option was read).
inline std::unique_ptr<SavedTensorStore> make_bf16_store(SchemeOptions&) { return std::make_unique<Bf16Store>(); }

}  // namespace my_scheme
