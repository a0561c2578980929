#include "quant/fewbit/fewbit_store.h"

#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "core/parallel.h"
#include "quant/bits/bitpack.h"

namespace packrat {

namespace {

// The two values of a step derivative, read from the activation's own f'.
void step_levels(const Pointwise& fn, float& lo, float& hi) {
  std::set<float> values;
  for (float x : {-1e4f, -7.0f, -3.0f, -1.0f, -0.5f, -1e-3f, 1e-3f, 0.5f, 1.0f, 3.0f, 5.5f, 7.0f, 1e4f}) values.insert(fn.df(x));
  PACKRAT_CHECK(values.size() == 2, "fewbit {}: a step derivative must take exactly two values, found {}", fn.name,
                values.size());
  lo = *values.begin();
  hi = *values.rbegin();
}

}  // namespace

FewbitStore::FewbitStore(FewbitStoreOptions o) : CompressingStore(Rules{}), options_(o) {
  PACKRAT_CHECK(o.bits >= 1 && o.bits <= kFewbitMaxBits, "fewbit store: bits must be in [1, {}], got {}",
                kFewbitMaxBits, o.bits);
}

bool FewbitStore::accepts(const SaveRequest& r) const {
  if (r.exact) return false;
  return (r.need == Need::Derivative && r.fn != nullptr) || r.need == Need::Mask;
}

FewbitStore::Coder FewbitStore::coder_for(const SaveRequest& r, bool from_output) const {
  Coder c;
  if (r.need == Need::Mask) {
    c.kind = Kind::Mask;
    c.bits = 1;
    return c;
  }
  PACKRAT_CHECK(r.need == Need::Derivative && r.fn, "fewbit store {} {}: only derivative and mask requests are served, got {}",
                r.op, r.name, need_name(r.need));
  const Pointwise& fn = *r.fn;
  c.from_output = from_output;
  if (fn.derivative_is_step) {
    c.kind = Kind::Step;
    c.bits = 1;
    step_levels(fn, c.lut.levels[0], c.step_hi);
    c.lut.levels[1] = c.step_hi;
    PACKRAT_CHECK(!from_output || fn.derivative_from_output, "fewbit store {} {}: f' of {} cannot be read from its output",
                  r.op, r.name, fn.name);
    return c;
  }
  const FewbitTable& t = fewbit_table(fn, options_.bits, options_.table);
  c.kind = Kind::Table;
  c.bits = t.bits;
  c.lut = t.lut();
  if (from_output) {
    // Index y = f(x) with the borders mapped through f: x > s <=> f(x) > f(s) where f increases;
    // for an even f', f(x) - f(0) is odd, so |x| > s <=> |y - f(0)| > f(s) - f(0).
    const float f0 = fn.f(0.0f);
    c.lut.center = t.symmetric ? f0 : 0.0f;
    float prev = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < c.lut.num_borders; ++j) {
      const float b = fn.f(static_cast<float>(t.borders[static_cast<size_t>(j)])) - (t.symmetric ? f0 : 0.0f);
      PACKRAT_CHECK(b > prev, "fewbit store {} {}: {} is not increasing across its table's borders, so its output "
                    "cannot be indexed; save its input instead", r.op, r.name, fn.name);
      c.lut.borders[j] = prev = b;
    }
  }
  return c;
}

struct FewbitStore::Codes : Encoded {
  Coder coder;
  Tensor packed;  // (packed_bytes(numel, bits),) u8, tagged Saved
  void payload(std::vector<PayloadSlot>& out) override { out.push_back({&packed}); }
};

namespace {

Tensor packed_buffer(int64_t n, int bits, Device device) {
  return Tensor::empty(Shape{packed_bytes(n, bits)}, DType::u8, Layout::Plain, MemTag::Saved,
                       device);  // (ceil(n * bits / 8),)
}

}  // namespace

CompressingStore::Form FewbitStore::form_for(const Tensor&, const SaveRequest&) const { return Form::Codec; }

// The codes depend on the function and, through from_output, on which tensor save() is handed;
// forward_and_save's codes of an input take variant 1.
std::pair<const Pointwise*, int> FewbitStore::codec_key(const SaveRequest& r) const { return {r.fn, 0}; }

SavedHandle FewbitStore::save(const Tensor& x, const SaveRequest& r) {
  PACKRAT_CHECK(accepts(r), "fewbit store {} {}: cannot keep a {} request", r.op, r.name, need_name(r.need));
  return CompressingStore::save(x, r);
}

std::unique_ptr<CompressingStore::Encoded> FewbitStore::encode(const Tensor& x, const SaveRequest& r) {
  const bool from_output = r.need == Need::Derivative && r.fn->derivative_from_output != nullptr;
  auto c = std::make_unique<Codes>();
  c->coder = coder_for(r, from_output);
  c->bits = c->coder.bits;
  if (r.need == Need::Mask)
    x.check_dtype(DType::u8, "fewbit store: a mask");
  else
    x.check_dtype(DType::f32, "fewbit store: an activation");
  c->packed = packed_buffer(x.numel(), c->coder.bits, x.device());
  fewbit_encode(c->coder, r.fn, x, Tensor(), c->packed);
  return c;
}

std::pair<Tensor, SavedHandle> FewbitStore::forward_and_save(const Tensor& x, const SaveRequest& r) {
  PACKRAT_CHECK(r.need == Need::Derivative && r.fn, "fewbit store {} {}: forward_and_save needs a derivative request",
                r.op, r.name);
  PACKRAT_CHECK(!r.exact, "fewbit store {} {}: cannot keep an exact request", r.op, r.name);
  check_device(x, r);
  // Autocast: a 16-bit x is indexed from its exact f32 values and y comes back in x's dtype
  // (fewbit_encode); the entry is x's, so the FP32 store's bytes it reports are the 16-bit ones
  // (the AMP baseline).
  if (!is_half(x.dtype())) x.check_dtype(DType::f32, "fewbit store: an activation");
  auto c = std::make_unique<Codes>();
  c->coder = coder_for(r, false);
  c->bits = c->coder.bits;
  c->packed = packed_buffer(x.numel(), c->coder.bits, x.device());
  const Tensor y = Tensor::empty_like(x);  // f(x): x's shape, layout and dtype
  fewbit_encode(c->coder, r.fn, x, y, c->packed);
  const Tensor& fp32_of = r.fn->derivative_from_output ? y : x;  // what the FP32 store would hold
  return {y, keep_encoded(x, fp32_of, r, std::move(c), 1)};
}

Tensor FewbitStore::decode(const Encoded& enc, const Entry& e) {
  const auto& c = static_cast<const Codes&>(enc);
  const bool mask = c.coder.kind == Kind::Mask;
  Tensor out = Tensor::empty(e.shape, mask ? DType::u8 : DType::f32, e.layout, TagScope::current(),
                             c.packed.device());  // the saved tensor's shape, layout and device
  if (mask) {
    unpack_codes(c.packed, 1, out);
    return out;
  }
  fewbit_decode(c.coder, c.packed, Tensor(), out);
  return out;
}

Tensor FewbitStore::apply_encoded(const Encoded& enc, const Entry& e, const Tensor& grad_out) {
  PACKRAT_CHECK(grad_out.shape() == e.shape, "{} {}: backward gradient {} does not match the saved {}", e.request.op,
                e.request.name, grad_out.shape().str(), e.shape.str());
  if (grad_out.dtype() != DType::f32) return Tensor();  // grad_out * load(h)
  const auto& c = static_cast<const Codes&>(enc);
  const Tensor g = grad_out.to_layout(e.layout);  // the codes follow the saved buffer's order
  Tensor out = Tensor::empty_like(g);
  fewbit_decode(c.coder, c.packed, g, out);
  return out;
}

std::unique_ptr<SavedTensorStore> make_fewbit_store(SchemeOptions& o) {
  FewbitStoreOptions so;
  so.bits = static_cast<int>(o.get_int("bits", 3, 1, kFewbitMaxBits));
  so.table.weight = fewbit_weight_by_name(o.get_string("weight", "uniform", {"uniform", "normal"}));
  so.table.refine = o.get_bool("refine", true);
  o.check_all_used();
  return std::make_unique<FewbitStore>(so);
}

}  // namespace packrat
