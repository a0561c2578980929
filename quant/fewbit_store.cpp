#include "quant/fewbit_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#if defined(__BMI2__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/parallel.h"
#include "quant/bitpack.h"

namespace packrat {

namespace {

constexpr int64_t kTile = 512;          // elements per tile: f(x), codes and scratch stay in L1
constexpr int64_t kGrainBlocks = 2048;  // blocks of 8 elements per thread chunk, at least
static_assert(kTile % 8 == 0, "tiles must start on block boundaries");

template <typename Fn>
void dispatch_bits(int bits, Fn&& fn) {
  switch (bits) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 3: fn(std::integral_constant<int, 3>{}); break;
    case 4: fn(std::integral_constant<int, 4>{}); break;
    default: fail("fewbit store: bits must be in [1, 4], got {}", bits);
  }
}

// Eight codes (bytes, each < 2^B) as one block word; with BMI2 one pext gathers the low B bits
// of each byte.
template <int B>
inline uint64_t pack8(const uint8_t* c) {
#if defined(__BMI2__)
  uint64_t v;
  std::memcpy(&v, c, 8);
  return _pext_u64(v, 0x0101010101010101ull * ((1u << B) - 1u));
#else
  uint64_t w = 0;
  for (int k = 0; k < 8; ++k) w |= block_put(c[k], k, B);
  return w;
#endif
}

// Packs len codes (len a multiple of 8 except at the very end of the tensor) to dst.
template <int B>
inline void pack_tile(const uint8_t* codes, int64_t len, uint8_t* dst) {
  const int64_t full = len / 8;
  for (int64_t blk = 0; blk < full; ++blk) store_block8(pack8<B>(codes + blk * 8), B, dst + blk * B);
  const int rest = static_cast<int>(len - full * 8);
  if (rest > 0) {
    uint64_t w = 0;
    for (int k = 0; k < rest; ++k) w |= block_put(codes[full * 8 + k], k, B);
    store_block8(w, static_cast<int>(packed_bytes(rest, B)), dst + full * B);
  }
}

// Codes of one tile. `src` is f32 (Table, Step) or u8 (Mask).
template <int B>
inline void make_codes(const FewbitStore::Coder& c, const Pointwise* fn, const void* src, int64_t len, uint8_t* codes,
                       float* scratch) {
  switch (c.kind) {
    case FewbitStore::Kind::Table: {
      constexpr int NB = (1 << B) - 1;
      const float* v = static_cast<const float*>(src);
      const FewbitLut lut = c.lut;
      for (int64_t i = 0; i < len; ++i) codes[i] = static_cast<uint8_t>(fewbit_index<NB>(lut, v[i]));
      break;
    }
    case FewbitStore::Kind::Step: {
      // The activation's own f' decides, so the mask agrees with the FP32 path bit for bit.
      const float* v = static_cast<const float*>(src);
      (c.from_output ? fn->derivative_from_output : fn->derivative)(v, scratch, len);
      const float hi = c.step_hi;
      for (int64_t i = 0; i < len; ++i) codes[i] = scratch[i] == hi ? 1 : 0;
      break;
    }
    case FewbitStore::Kind::Mask: {
      const uint8_t* m = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < len; ++i) codes[i] = m[i] != 0 ? 1 : 0;
      break;
    }
  }
}

// One pass over src: y = f(src) when y is given, and the packed codes of src.
template <int B>
void encode(const FewbitStore::Coder& c, const Pointwise* fn, const void* src, size_t elem, float* y, int64_t n,
            uint8_t* packed) {
  const int64_t blocks = (n + 7) / 8;
  parallel_chunks(blocks, kGrainBlocks, [&](int64_t b0, int64_t b1) {
    alignas(64) uint8_t codes[kTile];   // (kTile,)
    alignas(64) float scratch[kTile];   // (kTile,) f'(x) of a Step tile
    const int64_t end = std::min(n, b1 * 8);
    for (int64_t s = b0 * 8; s < end; s += kTile) {
      const int64_t len = std::min(kTile, end - s);
      const void* v = static_cast<const char*>(src) + s * static_cast<int64_t>(elem);
      if (y) fn->forward(static_cast<const float*>(v), y + s, len);
      make_codes<B>(c, fn, v, len, codes, scratch);
      pack_tile<B>(codes, len, packed + s / 8 * B);
    }
  });
}

// One pass: out = grad * level[code] (Table, Step), or code ? grad : 0 (Mask), or, with g null,
// out = level[code] (load).
template <int B>
void decode(const FewbitStore::Coder& c, const uint8_t* packed, const float* g, float* out, int64_t n) {
  const int64_t blocks = (n + 7) / 8;
  float levels[1 << B];  // (2^B,)
  for (int i = 0; i < (1 << B); ++i) levels[i] = c.lut.levels[i];
  const bool mask = c.kind == FewbitStore::Kind::Mask;
  parallel_chunks(blocks, kGrainBlocks, [&](int64_t b0, int64_t b1) {
    const int64_t full_end = std::min(b1, n / 8);
    for (int64_t blk = b0; blk < full_end; ++blk) {
      const uint64_t w = load_block8(packed + blk * B, B);
      const int64_t i0 = blk * 8;
      if (mask) {
        for (int k = 0; k < 8; ++k) out[i0 + k] = block_code(w, k, B) ? g[i0 + k] : 0.0f;
      } else if (g) {
        for (int k = 0; k < 8; ++k) out[i0 + k] = g[i0 + k] * levels[block_code(w, k, B)];
      } else {
        for (int k = 0; k < 8; ++k) out[i0 + k] = levels[block_code(w, k, B)];
      }
    }
    if (b1 * 8 > n && full_end < b1) {  // the last, partial block
      const int64_t i0 = full_end * 8;
      const int rest = static_cast<int>(n - i0);
      const uint64_t w = load_block8(packed + full_end * B, B, static_cast<int>(packed_bytes(rest, B)));
      for (int k = 0; k < rest; ++k) {
        const uint32_t code = block_code(w, k, B);
        out[i0 + k] = mask ? (code ? g[i0 + k] : 0.0f) : (g ? g[i0 + k] * levels[code] : levels[code]);
      }
    }
  });
}

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

FewbitStore::FewbitStore(FewbitStoreOptions o) : options_(o) {
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

SavedHandle FewbitStore::keep(Entry e) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_id_++;
  entries_.emplace(id, std::move(e));
  return {this, id};
}

const FewbitStore::Entry& FewbitStore::entry(const SavedHandle& h) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(h.id);
  PACKRAT_CHECK(it != entries_.end(), "fewbit store: saved tensor {} was already released (a second backward?)", h.id);
  return it->second;
}

namespace {

Tensor packed_buffer(int64_t n, int bits) {
  TagScope saved(MemTag::Saved);
  return Tensor::empty(Shape{packed_bytes(n, bits)}, DType::u8);  // (ceil(n * bits / 8),)
}

}  // namespace

SavedHandle FewbitStore::save(const Tensor& x, const SaveRequest& r) {
  PACKRAT_CHECK(accepts(r), "fewbit store {} {}: cannot keep a {} request", r.op, r.name, need_name(r.need));
  const bool from_output = r.need == Need::Derivative && r.fn->derivative_from_output != nullptr;
  Entry e{coder_for(r, from_output), Tensor(), r, x.shape(), x.layout()};
  if (r.need == Need::Mask)
    x.check_dtype(DType::u8, "fewbit store: a mask");
  else
    x.check_dtype(DType::f32, "fewbit store: an activation");
  e.packed = packed_buffer(x.numel(), e.coder.bits);
  e.fp32_key = x.storage()->id;
  const size_t elem = dtype_size(x.dtype());
  dispatch_bits(e.coder.bits, [&](auto B) {
    encode<B()>(e.coder, r.fn, x.raw(), elem, nullptr, x.numel(), e.packed.data<uint8_t>());
  });
  return keep(std::move(e));
}

std::pair<Tensor, SavedHandle> FewbitStore::forward_and_save(const Tensor& x, const SaveRequest& r) {
  PACKRAT_CHECK(r.need == Need::Derivative && r.fn, "fewbit store {} {}: forward_and_save needs a derivative request",
                r.op, r.name);
  PACKRAT_CHECK(!r.exact, "fewbit store {} {}: cannot keep an exact request", r.op, r.name);
  x.check_dtype(DType::f32, "fewbit store: an activation");
  Entry e{coder_for(r, false), Tensor(), r, x.shape(), x.layout()};
  e.packed = packed_buffer(x.numel(), e.coder.bits);
  Tensor y = Tensor::empty_like(x);  // same shape and layout as x
  dispatch_bits(e.coder.bits, [&](auto B) {
    encode<B()>(e.coder, r.fn, x.raw(), sizeof(float), y.data<float>(), x.numel(), e.packed.data<uint8_t>());
  });
  e.fp32_key = (r.fn->derivative_from_output ? y : x).storage()->id;
  return {y, keep(std::move(e))};
}

Tensor FewbitStore::load(const SavedHandle& h) {
  const Entry& e = entry(h);
  const bool mask = e.coder.kind == Kind::Mask;
  Tensor out = Tensor::empty(e.shape, mask ? DType::u8 : DType::f32, e.layout);
  const int64_t n = out.numel();
  const uint8_t* packed = e.packed.data<uint8_t>();
  if (mask) {
    unpack_bits(packed, n, 1, out.data<uint8_t>());
    return out;
  }
  dispatch_bits(e.coder.bits, [&](auto B) { decode<B()>(e.coder, packed, nullptr, out.data<float>(), n); });
  return out;
}

Tensor FewbitStore::apply_derivative(const SavedHandle& h, const Tensor& grad_out) {
  const Entry& e = entry(h);
  PACKRAT_CHECK(grad_out.shape() == e.shape, "{} {}: backward gradient {} does not match the saved {}", e.request.op,
                e.request.name, grad_out.shape().str(), e.shape.str());
  if (grad_out.dtype() != DType::f32) return multiply_elementwise(grad_out, load(h));
  const Tensor g = grad_out.to_layout(e.layout);  // the codes follow the saved buffer's order
  Tensor out = Tensor::empty_like(g);
  dispatch_bits(e.coder.bits, [&](auto B) {
    decode<B()>(e.coder, e.packed.data<uint8_t>(), g.data<float>(), out.data<float>(), g.numel());
  });
  return out;
}

void FewbitStore::release(const SavedHandle& h) {
  std::lock_guard lock(mutex_);
  entries_.erase(h.id);
}

void FewbitStore::describe(std::vector<SavedRecord>& out) const {
  std::lock_guard lock(mutex_);
  for (const auto& [id, e] : entries_) {
    SavedRecord rec;
    rec.layer = e.request.name;
    rec.op = std::string(e.request.op);
    rec.scheme = "fewbit";
    rec.need = e.request.need;
    rec.bits = e.coder.bits;
    rec.numel = e.shape.numel();
    rec.bytes = static_cast<int64_t>(e.packed.storage()->allocation->bytes());
    // What the FP32 store holds: f32 activations, u8 masks (like PyTorch's bool masks).
    rec.fp32_bytes = rec.numel * (e.coder.kind == Kind::Mask ? 1 : 4);
    rec.fp32_key = e.fp32_key;
    out.push_back(std::move(rec));
  }
}

size_t FewbitStore::live_count() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
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
