#include "quant/mixed_store.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "autograd/fp32_store.h"  // pointwise_derivative
#include "core/error.h"
#include "core/parallel.h"

namespace packrat {

std::string_view storage_mode_name(StorageMode m) {
  return m == StorageMode::SaveQuantized ? "save_quantized" : "quantize_on_backward";
}

void MixedStoreOptions::check(std::string_view where) const {
  PACKRAT_CHECK(scheme == "mixed" || scheme == "deterministic", "{}: the mixed store's scheme is 'mixed' or "
                "'deterministic', got '{}'", where, scheme);
  schedule.check(where);
  PACKRAT_CHECK(total_steps >= 0, "{}: total_steps must not be negative, got {}", where, total_steps);
  MixedQuantConfig q = quant;
  q.mix_prob = schedule.start;
  q.check(where);
}

int64_t MixedStore::Held::bytes() const {
  int64_t b = packed.bytes();
  for (const Tensor* t : {&reference, &bits})
    if (t->defined()) b += static_cast<int64_t>(t->storage()->allocation->bytes());
  return b;
}

double MixedStore::Held::bits_per_element() const {
  return numel ? 8.0 * static_cast<double>(bytes()) / static_cast<double>(numel) : 0.0;
}

MixedStore::MixedStore(MixedStoreOptions o) : options_(std::move(o)) {
  options_.check(fmt::format("{} store", options_.scheme));
  if (options_.label.empty())
    options_.label = options_.quant.base == options_.quant.mix
                         ? fmt::format("{}-bit", options_.quant.base.bits)
                         : fmt::format("{}/{}@{}", options_.quant.base.bits, options_.quant.mix.bits,
                                       options_.schedule.describe());
}

namespace {

// codes[i] = x[i]; false when a value lies outside [0, 2^bits).
template <typename T>
bool integer_codes(const T* x, int64_t n, int bits, uint16_t* codes) {
  const int64_t limit = int64_t{1} << bits;
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(x[i]);
    ok &= v >= 0 && v < limit;
    codes[i] = static_cast<uint16_t>(v);
  }
  return ok;
}

bool integer_codes(const Tensor& x, int bits, uint16_t* codes) {
  switch (x.dtype()) {
    case DType::u8: return integer_codes(x.data<uint8_t>(), x.numel(), bits, codes);
    case DType::i32: return integer_codes(x.data<int32_t>(), x.numel(), bits, codes);
    case DType::i64: return integer_codes(x.data<int64_t>(), x.numel(), bits, codes);
    default: return false;
  }
}

template <typename T>
void integer_values(const uint16_t* codes, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(codes[i]);
}

}  // namespace

void MixedStore::count(const MixedPacked& p) {
  const BucketGeometry g = p.geometry();
  ++stats_.tensors;
  stats_.elements += p.numel;
  stats_.buckets += g.buckets;
  stats_.mix_buckets += p.mix_buckets;
  stats_.code_bytes += p.codes.defined() ? static_cast<int64_t>(p.codes.nbytes()) : 0;
  stats_.bytes += p.bytes();
}

uint64_t MixedStore::find_held(const Key& k, const Tensor& x) const {
  auto it = by_key_.find(k);
  if (it == by_key_.end()) return 0;
  const Held& h = held_.at(it->second);
  // The same live buffer at the same version: not a new tensor at a recycled address.
  if (h.source.lock() != x.storage() || h.version != x.version() || h.numel != x.numel()) return 0;
  return it->second;
}

uint64_t MixedStore::keep(Held h, const Tensor& x) {
  h.source = x.storage();
  h.version = x.version();
  h.numel = x.numel();
  const uint64_t id = next_held_++;
  by_key_[h.key] = id;
  held_.emplace(id, std::move(h));
  return id;
}

void MixedStore::quantize(Held& h, const Tensor& x) {
  h.quant = options_.quant;
  h.quant.mix_prob = options_.schedule.at(progress_);
  h.noise = QuantNoise{options_.seed, quant_stream(static_cast<uint64_t>(step_), tensor_index_++)};
  if (options_.mode == StorageMode::QuantizeOnBackward) {
    h.reference = x;
    h.original_tag = x.storage()->allocation->tag();
    if (h.original_tag != MemTag::Parameter) x.storage()->allocation->retag(MemTag::Saved);
    return;
  }
  TagScope tag(MemTag::Saved);
  h.packed = quantize_mixed(x.data<float>(), x.numel(), h.quant, h.noise);
  count(h.packed);
}

SavedHandle MixedStore::save(const Tensor& x, const SaveRequest& r) {
  PACKRAT_CHECK(x.defined(), "{} store {} {}: cannot save an undefined tensor", options_.scheme, r.op, r.name);
  PACKRAT_CHECK(r.need != Need::Derivative || r.fn != nullptr, "{} {}: a derivative request needs its pointwise function",
                r.op, r.name);
  std::lock_guard lock(mutex_);
  const bool quantizable = (r.need == Need::Value || r.need == Need::Derivative) && x.dtype() == DType::f32;
  const int pack_bits_wanted = r.need == Need::Mask ? 1 : r.need == Need::Index ? static_cast<int>(r.index_bits) : 0;
  const bool packable = pack_bits_wanted >= 1 && pack_bits_wanted <= kMaxCodeBits &&
                        (x.dtype() == DType::u8 || x.dtype() == DType::i32 || x.dtype() == DType::i64);
  // Kept in f32 by exact_ (and counted by it); the handle stays ours so that any caller can load it.
  auto keep_exact = [&] {
    const uint64_t id = next_id_++;
    entries_.emplace(id, Entry{0, r, x.shape(), x.dtype(), x.layout(), false, exact_.save(x, r)});
    return SavedHandle{this, id};
  };
  if (r.exact || (!quantizable && !packable)) return keep_exact();

  const bool step = quantizable && r.need == Need::Derivative && r.fn->derivative_is_step;
  const Key key{x.storage().get(), step ? Form::StepMask : quantizable ? Form::Quantized : Form::Packed,
                step ? r.fn : nullptr, quantizable ? 0 : pack_bits_wanted};
  uint64_t held = find_held(key, x);
  const bool shared = held != 0;
  if (!shared) {
    Held h;
    h.key = key;
    const int64_t n = x.numel();
    if (key.form == Form::Quantized) {
      quantize(h, x);
    } else if (key.form == Form::StepMask) {
      h.lo = r.fn->df(-1.0f);  // the two values a step derivative takes (relu: 0, 1; leaky_relu: slope, 1)
      h.hi = r.fn->df(1.0f);
      Tensor mask;  // (n,) u8, 1 where f' is hi
      {
        TagScope tag(MemTag::Workspace);
        const Tensor d = pointwise_derivative(*r.fn, x);  // from y where fn->derivative_from_output is set
        mask = Tensor::empty(Shape{n}, DType::u8);
        const float* dp = d.data<float>();
        uint8_t* m = mask.data<uint8_t>();
        for (int64_t i = 0; i < n; ++i) m[i] = dp[i] == h.hi ? 1 : 0;
      }
      TagScope tag(MemTag::Saved);
      h.bits = Tensor::empty(Shape{packed_bytes(n, 1)}, DType::u8);  // (ceil(n / 8),)
      pack_bits(mask.data<uint8_t>(), n, 1, h.bits.data<uint8_t>());
    } else {
      std::vector<uint16_t> codes(static_cast<size_t>(n));  // (n,)
      // A mask or index its bits cannot hold (e.g. a negative ignore label) is kept exactly.
      if (!integer_codes(x, pack_bits_wanted, codes.data())) return keep_exact();
      TagScope tag(MemTag::Saved);
      h.bits = Tensor::empty(Shape{packed_bytes(n, pack_bits_wanted)}, DType::u8);  // (ceil(n * bits / 8),)
      pack_wide_codes(codes.data(), n, pack_bits_wanted, h.bits.data<uint8_t>());
    }
    held = keep(std::move(h), x);
  }
  ++held_.at(held).refs;
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{held, r, x.shape(), x.dtype(), x.layout(), shared, SavedHandle{}, x.storage()->id});
  return {this, id};
}

Tensor MixedStore::dequantized(const Held& h, const Entry& e) {
  Tensor out = Tensor::empty(e.shape, DType::f32, e.layout);  // the saved tensor's shape and layout
  if (options_.mode == StorageMode::SaveQuantized) {
    dequantize_mixed(h.packed, out.data<float>());
    return out;
  }
  // quantize_on_backward: quantize now, with the keys drawn at save.
  const MixedPacked p = quantize_mixed(h.reference.data<float>(), h.numel, h.quant, h.noise);
  count(p);
  dequantize_mixed(p, out.data<float>());
  return out;
}

Tensor MixedStore::load(const SavedHandle& handle) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(handle.id);
  PACKRAT_CHECK(it != entries_.end(), "{} store: saved tensor {} was already released (a second backward?)",
                options_.scheme, handle.id);
  const Entry& e = it->second;
  if (e.exact.valid()) return exact_.load(e.exact);
  const Held& h = held_.at(e.held);
  if (auto src = h.source.lock(); src && src->version != h.version)
    fail("{} {}: a tensor saved for backward was modified in place after it was saved (version {}, saved at {}); "
         "use an out-of-place op",
         e.request.op, e.request.name, src->version, h.version);
  TagScope tag(MemTag::Workspace);  // a transient copy for the backward of one op
  const int64_t n = h.numel;
  switch (h.key.form) {
    case Form::Quantized: {
      Tensor t = dequantized(h, e);
      return e.request.need == Need::Derivative ? pointwise_derivative(*e.request.fn, t) : t;
    }
    case Form::StepMask: {
      std::vector<uint8_t> m(static_cast<size_t>(n));  // (n,)
      unpack_bits(h.bits.data<uint8_t>(), n, 1, m.data());
      Tensor out = Tensor::empty(e.shape, DType::f32, e.layout);  // f'(x), the saved tensor's shape and layout
      float* o = out.data<float>();
      for (int64_t i = 0; i < n; ++i) o[i] = m[static_cast<size_t>(i)] ? h.hi : h.lo;
      return out;
    }
    case Form::Packed: {
      std::vector<uint16_t> codes(static_cast<size_t>(n));  // (n,)
      unpack_wide_codes(h.bits.data<uint8_t>(), n, h.key.bits, codes.data());
      Tensor out = Tensor::empty(e.shape, e.dtype, e.layout);  // the saved tensor's shape, dtype and layout
      switch (e.dtype) {
        case DType::u8: integer_values(codes.data(), n, out.data<uint8_t>()); break;
        case DType::i32: integer_values(codes.data(), n, out.data<int32_t>()); break;
        default: integer_values(codes.data(), n, out.data<int64_t>()); break;
      }
      return out;
    }
  }
  fail("{} store: unknown held form", options_.scheme);
}

void MixedStore::release(const SavedHandle& handle) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(handle.id);
  if (it == entries_.end()) return;
  if (it->second.exact.valid()) {
    exact_.release(it->second.exact);
    entries_.erase(it);
    return;
  }
  auto hit = held_.find(it->second.held);
  Held& h = hit->second;
  if (--h.refs == 0) {
    // A referenced tensor still used elsewhere (the forward output the caller holds) goes back to its own account.
    if (h.reference.defined() && h.original_tag != MemTag::Parameter) h.reference.storage()->allocation->retag(h.original_tag);
    if (auto k = by_key_.find(h.key); k != by_key_.end() && k->second == hit->first) by_key_.erase(k);
    held_.erase(hit);
  }
  entries_.erase(it);
}

void MixedStore::describe(std::vector<SavedRecord>& out) const {
  std::lock_guard lock(mutex_);
  for (const auto& [id, e] : entries_) {
    if (e.exact.valid()) continue;  // described by exact_ below
    const Held& h = held_.at(e.held);
    SavedRecord rec;
    rec.layer = e.request.name;
    rec.op = std::string(e.request.op);
    rec.scheme = options_.scheme;
    rec.need = e.request.need;
    rec.numel = e.shape.numel();
    rec.bits = h.bits_per_element();  // realised: codes at their bucket's bits, metadata and flags included
    rec.shared = e.shared;
    rec.fp32_key = e.fp32_key;
    rec.bytes = e.shared ? 0 : h.bytes();
    rec.fp32_bytes = e.shared ? 0 : rec.numel * static_cast<int64_t>(dtype_size(e.dtype));
    out.push_back(std::move(rec));
  }
  exact_.describe(out);
}

size_t MixedStore::live_count() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

void MixedStore::begin_step(int64_t step) {
  std::lock_guard lock(mutex_);
  step_ = step;
  tensor_index_ = 0;
  if (options_.total_steps > 0)
    progress_ = std::clamp(static_cast<double>(step) / static_cast<double>(options_.total_steps), 0.0, 1.0);
}

void MixedStore::set_progress(double fraction) {
  PACKRAT_CHECK(fraction >= 0.0 && fraction <= 1.0, "{} store: progress must be a fraction of training in [0, 1], got {}",
                options_.scheme, fraction);
  std::lock_guard lock(mutex_);
  progress_ = fraction;
}

double MixedStore::progress() const {
  std::lock_guard lock(mutex_);
  return progress_;
}

double MixedStore::current_mix_prob() const {
  std::lock_guard lock(mutex_);
  return options_.schedule.at(progress_);
}

MixedStoreStats MixedStore::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void MixedStore::reset_stats() {
  std::lock_guard lock(mutex_);
  stats_ = {};
}

std::string MixedStore::summary() const {
  const MixedStoreStats s = stats();
  const auto& q = options_.quant;
  return fmt::format("{} {} {} {} bucket {} {}: {:.3f} bits/element held (codes {:.3f}), {:.1f}% mix buckets over {} tensors",
                     options_.scheme, options_.label, scale_rule_name(q.scale), rounding_name(q.rounding), q.bucket_size,
                     storage_mode_name(options_.mode), s.bits(), s.code_bits(), 100.0 * s.mix_fraction(), s.tensors);
}

void set_training_progress(StorePolicy& policy, double fraction) {
  for (SavedTensorStore* s : policy.stores())
    if (auto* m = dynamic_cast<MixedStore*>(s)) m->set_progress(fraction);
}

// ---- factories ----------------------------------------------------------------------------

namespace {

ScaleRule scale_rule_by_name(const std::string& s) {
  return s == "maxabs" ? ScaleRule::MaxAbs : s == "l2" ? ScaleRule::L2 : ScaleRule::Affine;
}

// Options both schemes share: bucket_size, scale, meta, mode.
void read_common(SchemeOptions& o, MixedStoreOptions& so) {
  so.quant.bucket_size = o.get_int("bucket_size", 512, 1, int64_t{1} << 40);
  so.quant.scale = scale_rule_by_name(o.get_string("scale", "affine", {"affine", "maxabs", "l2"}));
  so.quant.meta = o.get_string("meta", "bf16", {"bf16", "f32"}) == "f32" ? MetaType::F32 : MetaType::BF16;
  so.mode = o.get_string("mode", "save_quantized", {"save_quantized", "quantize_on_backward"}) == "save_quantized"
                ? StorageMode::SaveQuantized
                : StorageMode::QuantizeOnBackward;
}

// The width for nominal bits under the scale rule, with errors naming the key.
BucketWidth width_from_bits(ScaleRule s, int64_t bits, const char* key, const std::string& where) {
  const int64_t max = is_sign_magnitude(s) ? kMaxCodeBits - 2 : kMaxCodeBits;
  PACKRAT_CHECK(bits >= 1 && bits <= max, "{}: '{}' is {}, must be in [1, {}] for the {} scale rule{}", where, key, bits,
                max, scale_rule_name(s),
                is_sign_magnitude(s) ? " (its 2^bits levels and sign take bits + 2 bits per element)" : "");
  return width_for_bits(s, static_cast<int>(bits));
}

}  // namespace

std::unique_ptr<SavedTensorStore> make_mixed_store(SchemeOptions& o) {
  const std::string& where = o.where();
  MixedStoreOptions so;
  so.scheme = "mixed";
  read_common(o, so);
  const ScaleRule rule = so.quant.scale;

  int64_t base_bits = 2, mix_bits = 4;
  double mix_prob = 0.5;
  const std::string preset = o.get_string("preset", "", {});
  if (!preset.empty()) {
    for (const char* k : {"base_bits", "mix_bits", "mix_prob", "base_levels", "mix_levels"})
      PACKRAT_CHECK(!o.has(k), "{}: give either 'preset' ({}) or '{}', not both", where, preset, k);
    const MixPreset p = parse_mix_preset(preset, where);
    base_bits = p.base_bits;
    mix_bits = p.mix_bits;
    mix_prob = p.mix_prob;
    so.label = p.name;
  }
  base_bits = o.get_int("base_bits", base_bits, 1, 64);
  mix_bits = o.get_int("mix_bits", mix_bits, 1, 64);
  so.schedule.start = o.get_double("mix_prob", mix_prob, 0.0, 1.0);
  so.quant.base = width_from_bits(rule, base_bits, "base_bits", where);
  so.quant.mix = width_from_bits(rule, mix_bits, "mix_bits", where);
  for (const char* k : {"base_levels", "mix_levels"}) {
    if (!o.has(k)) continue;
    PACKRAT_CHECK(is_sign_magnitude(rule), "{}: '{}' sets the levels of the sign-magnitude rules (scale: maxabs or l2); "
                  "the affine rule takes base_bits / mix_bits", where, k);
    PACKRAT_CHECK(!o.has(std::string(k) == "base_levels" ? "base_bits" : "mix_bits"),
                  "{}: give either '{}' or the matching bits, not both", where, k);
    const int64_t max_levels = (int64_t{1} << (kMaxCodeBits - 1)) - 1;  // 2L + 1 codes in 16 bits
    const auto levels = static_cast<uint32_t>(o.get_int(k, 1, 1, max_levels));
    (std::string(k) == "base_levels" ? so.quant.base : so.quant.mix) = sign_magnitude_width(levels);
  }
  PACKRAT_CHECK(so.quant.mix.levels >= so.quant.base.levels,
                "{}: mix_bits ({}) is below base_bits ({}): the mix width is the higher precision a bucket is promoted to",
                where, so.quant.mix.bits, so.quant.base.bits);

  const bool has_end = o.has("mix_prob_end");
  so.schedule.end = o.get_double("mix_prob_end", so.schedule.start, 0.0, 1.0);
  const std::string kind = o.get_string("schedule", has_end ? "linear" : "constant", {"constant", "linear", "cosine"});
  so.schedule.kind = kind == "linear" ? ScheduleKind::Linear : kind == "cosine" ? ScheduleKind::Cosine : ScheduleKind::Constant;
  PACKRAT_CHECK(so.schedule.kind == ScheduleKind::Constant || has_end,
                "{}: a {} schedule needs 'mix_prob_end' (mix_prob is its start)", where, kind);
  PACKRAT_CHECK(so.schedule.kind != ScheduleKind::Constant || !has_end,
                "{}: 'mix_prob_end' is given but the schedule is constant; use schedule: linear or cosine", where);
  so.total_steps = o.get_int("total_steps", 0, 0, int64_t{1} << 50);

  so.quant.decision =
      o.get_string("decision", "per_bucket", {"per_bucket", "per_tensor"}) == "per_bucket" ? MixDecision::PerBucket : MixDecision::PerTensor;
  so.quant.rounding =
      o.get_string("rounding", "stochastic", {"stochastic", "nearest"}) == "stochastic" ? Rounding::Stochastic : Rounding::Nearest;
  so.seed = static_cast<uint64_t>(o.get_int("seed", 0, 0, INT64_MAX));
  o.check_all_used();
  so.check(where);
  return std::make_unique<MixedStore>(std::move(so));
}

std::unique_ptr<SavedTensorStore> make_deterministic_store(SchemeOptions& o) {
  MixedStoreOptions so;
  so.scheme = "deterministic";
  read_common(o, so);
  const int64_t bits = o.get_int("bits", 4, 1, 64);
  so.quant.base = so.quant.mix = width_from_bits(so.quant.scale, bits, "bits", o.where());
  so.quant.rounding = Rounding::Nearest;
  so.schedule = MixSchedule{ScheduleKind::Constant, 0.0, 0.0};
  so.label = fmt::format("{}-bit", bits);
  o.check_all_used();
  so.check(o.where());
  return std::make_unique<MixedStore>(std::move(so));
}

}  // namespace packrat
