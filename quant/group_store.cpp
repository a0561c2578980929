#include "quant/group_store.h"

#include <cstring>

#include "core/parallel.h"
#include "quant/bitpack.h"

namespace packrat {

namespace {

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t leading_samples(const Tensor& x) { return x.rank() >= 2 ? x.dim(0) : 1; }

}  // namespace

std::vector<double> per_sample_sq_norms(const Tensor& t) {
  const int64_t n = leading_samples(t), numel = t.numel();
  std::vector<double> out(static_cast<size_t>(n), 0.0);  // (N,)
  if (numel == 0) return out;
  const int64_t span = numel / n;
  if (t.dtype() == DType::f64) {
    const double* p = t.data<double>();
    for (int64_t i = 0; i < numel; ++i) out[static_cast<size_t>(i / span)] += p[i] * p[i];
    return out;
  }
  const float* p = t.data<float>();
  parallel_for(0, n, [&](int64_t s) {
    double acc = 0;
    const float* q = p + s * span;
    for (int64_t i = 0; i < span; ++i) acc += static_cast<double>(q[i]) * q[i];
    out[static_cast<size_t>(s)] = acc;
  });
  return out;
}

double jacobian_factor(std::string_view op, const Tensor& grad_out) {
  const int64_t n = leading_samples(grad_out), per = std::max<int64_t>(1, grad_out.numel() / std::max<int64_t>(1, n));
  if (op == "linear" || op == "matmul") {
    const int64_t last = grad_out.rank() >= 2 ? grad_out.dim(-1) : per;
    return 1.0 / static_cast<double>(std::max<int64_t>(1, per / std::max<int64_t>(1, last)));
  }
  if (op == "conv2d" && grad_out.rank() == 4) return 9.0 / static_cast<double>(std::max<int64_t>(1, grad_out.dim(2) * grad_out.dim(3)));
  return 1.0 / static_cast<double>(per);
}

GroupStore::GroupStore(GroupStoreOptions o) : opts_(o) { opts_.quant.check("per-group store"); }

GroupStoreOptions GroupStore::parse_options(SchemeOptions& o, const GroupStoreOptions& base) {
  GroupStoreOptions g = base;
  const GroupQuantConfig& q = base.quant;
  g.quant.bits = static_cast<int>(o.get_int("bits", q.bits, 1, 8));
  PACKRAT_CHECK(group_bits_supported(g.quant.bits),
                "{}: 'bits' is {}; per-group quantization supports 1, 2, 3, 4 or 8 bits", o.where(), g.quant.bits);
  g.quant.group_size = o.get_int("group_size", q.group_size, 1, int64_t{1} << 30);
  g.quant.grouping = o.get_string("grouping", std::string(grouping_name(q.grouping)), {"per_sample", "flat"}) == "flat"
                         ? Grouping::Flat
                         : Grouping::PerSample;
  g.quant.meta =
      o.get_string("meta", std::string(meta_name(q.meta)), {"bf16", "f32"}) == "f32" ? MetaType::F32 : MetaType::BF16;
  g.quant.rounding =
      o.get_string("rounding", std::string(rounding_name(q.rounding)), {"stochastic", "nearest"}) == "nearest"
          ? Rounding::Nearest
          : Rounding::Stochastic;
  g.seed = static_cast<uint64_t>(o.get_int("seed", static_cast<int64_t>(base.seed), 0, INT64_MAX));
  return g;
}

std::unique_ptr<SavedTensorStore> make_group_store(SchemeOptions& o) {
  GroupStoreOptions g = GroupStore::parse_options(o);
  o.check_all_used();
  return std::make_unique<GroupStore>(g);
}

void GroupStore::begin_step(int64_t step) {
  step_ = step;
  next_index_ = 0;
  step_tensors_.clear();
}

void GroupStore::set_noise_salt(int64_t index, uint64_t salt) {
  if (salt == 0)
    salts_.erase(index);
  else
    salts_[index] = salt;
}

uint64_t GroupStore::noise_seed(int64_t index) const {
  auto it = salts_.find(index);
  return it == salts_.end() ? opts_.seed : splitmix64(opts_.seed ^ splitmix64(it->second));
}

uint64_t GroupStore::find_held(const Key& k, const Tensor& x) const {
  auto it = by_key_.find(k);
  if (it == by_key_.end()) return 0;
  const Held& h = held_.at(it->second);
  // The same live buffer at the same version: not a new tensor at a recycled address.
  if (h.source.lock() != x.storage() || h.version != x.version()) return 0;
  return it->second;
}

uint64_t GroupStore::quantize(const Tensor& x, const SaveRequest& r) {
  const int64_t index = next_index_++;
  GroupQuantConfig cfg = opts_.quant;
  if (provider_) cfg.bits = provider_->bits_for(index, r, x);
  PACKRAT_CHECK(group_bits_supported(cfg.bits), "{} {}: per-group quantization supports 1, 2, 3, 4 or 8 bits, got {}",
                r.op, r.name, cfg.bits);
  const int64_t samples = leading_samples(x);
  Held h;
  h.bits = cfg.bits;
  h.geometry = group_geometry(x.numel(), samples, cfg);
  {
    TagScope tag(MemTag::Saved);
    h.codes = Tensor::empty({h.geometry.code_bytes()}, DType::u8);  // (code bytes,)
    h.meta = Tensor::empty({h.geometry.meta_bytes()}, DType::u8);   // (groups * meta bytes per group,)
  }
  std::vector<double> group_range_sq;  // (groups,)
  const QuantNoise noise{noise_seed(index), quant_stream(static_cast<uint64_t>(step_), static_cast<uint64_t>(index))};
  quantize_groups(x.data<float>(), h.geometry, cfg.rounding, noise, h.codes.data<uint8_t>(), h.meta.data<uint8_t>(),
                  provider_ ? &group_range_sq : nullptr);

  QuantizedTensorInfo info;
  info.index = index;
  info.layer = r.name;
  info.op = std::string(r.op);
  info.need = r.need;
  info.numel = x.numel();
  info.samples = samples;
  info.bits = cfg.bits;
  info.bytes = h.geometry.total_bytes();
  if (provider_) {
    info.sample_range_sq.assign(static_cast<size_t>(samples), 0.0);
    const int64_t per_sample = std::max<int64_t>(1, x.numel() / samples);
    for (int64_t g = 0; g < h.geometry.groups(); ++g)
      info.sample_range_sq[static_cast<size_t>(std::min(samples - 1, h.geometry.group_start(g) / per_sample))] +=
          group_range_sq[static_cast<size_t>(g)];
  }
  step_tensors_.push_back(std::move(info));
  h.index = index;
  h.step = step_;
  h.key = Key{x.storage().get(), Form::Quantized, nullptr};
  h.source = x.storage();
  h.version = x.version();
  const uint64_t id = next_held_++;
  held_.emplace(id, std::move(h));
  return id;
}

uint64_t GroupStore::pack_exact_bits(const Tensor& x, const SaveRequest& r, int bits) {
  const int64_t n = x.numel();
  const int64_t limit = int64_t{1} << bits;
  Held h;
  h.form = Form::Packed;
  h.bits = bits;
  Tensor codes;  // (numel,) u8: x itself for u8 data, a converted copy otherwise
  if (x.dtype() == DType::u8) {
    codes = x;
  } else {
    TagScope tag(MemTag::Workspace);
    codes = Tensor::empty({n}, DType::u8);
  }
  uint8_t* c = codes.data<uint8_t>();
  int64_t bad = -1;
  auto check_copy = [&](auto* src) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = static_cast<int64_t>(src[i]);
      if (v < 0 || v >= limit) {
        bad = i;
        return;
      }
      c[i] = static_cast<uint8_t>(v);
    }
  };
  switch (x.dtype()) {
    case DType::u8: {
      const uint8_t* p = x.data<uint8_t>();
      for (int64_t i = 0; i < n && bad < 0; ++i)
        if (p[i] >= limit) bad = i;
      break;
    }
    case DType::i32: check_copy(x.data<int32_t>()); break;
    case DType::i64: check_copy(x.data<int64_t>()); break;
    default: fail("{} {}: a {} request must hold integers (u8, i32, i64), got {}", r.op, r.name, need_name(r.need),
                  dtype_name(x.dtype()));
  }
  if (bad >= 0)
    fail("{} {}: {} element {} does not fit in {} bit(s) (a {} request must hold values in [0, {}))", r.op, r.name,
         need_name(r.need), bad, bits, need_name(r.need), limit);
  {
    TagScope tag(MemTag::Saved);
    h.codes = Tensor::empty({packed_bytes(n, bits)}, DType::u8);  // (packed bytes,)
  }
  pack_bits(c, n, bits, h.codes.data<uint8_t>());
  h.key = Key{x.storage().get(), Form::Packed, nullptr};
  h.source = x.storage();
  h.version = x.version();
  const uint64_t id = next_held_++;
  held_.emplace(id, std::move(h));
  return id;
}

uint64_t GroupStore::pack_step_derivative(const Tensor& x, const SaveRequest& r) {
  const Pointwise& fn = *r.fn;
  Held h;
  h.form = Form::StepMask;
  h.bits = 1;
  h.fn = &fn;
  h.lo = fn.df(-1.0f);  // the two values a step derivative takes (relu: 0, 1; leaky_relu: slope, 1)
  h.hi = fn.df(1.0f);
  const int64_t n = x.numel();
  Tensor mask;  // (numel,) u8
  {
    TagScope tag(MemTag::Workspace);
    Tensor d = pointwise_derivative(fn, x);  // from y where fn->derivative_from_output is set
    mask = Tensor::empty({n}, DType::u8);
    const float* dp = d.data<float>();
    uint8_t* m = mask.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) m[i] = dp[i] == h.hi ? 1 : 0;
  }
  {
    TagScope tag(MemTag::Saved);
    h.codes = Tensor::empty({packed_bytes(n, 1)}, DType::u8);  // (packed bytes,)
  }
  pack_bits(mask.data<uint8_t>(), n, 1, h.codes.data<uint8_t>());
  h.key = Key{x.storage().get(), Form::StepMask, &fn};
  h.source = x.storage();
  h.version = x.version();
  const uint64_t id = next_held_++;
  held_.emplace(id, std::move(h));
  return id;
}

SavedHandle GroupStore::save(const Tensor& x, const SaveRequest& r) {
  const bool quantizable = (r.need == Need::Value || r.need == Need::Derivative) && x.dtype() == DType::f32;
  const bool packable = r.need == Need::Mask || (r.need == Need::Index && r.index_bits >= 1 && r.index_bits <= 8);
  if (r.exact || (!quantizable && !packable)) return exact_.save(x, r);  // kept in FP32, counted by exact_
  if (r.need == Need::Derivative)
    PACKRAT_CHECK(r.fn != nullptr, "{} {}: a derivative request needs its pointwise function", r.op, r.name);

  const bool step = quantizable && r.need == Need::Derivative && r.fn->derivative_is_step;
  const Key key{x.storage().get(), step ? Form::StepMask : quantizable ? Form::Quantized : Form::Packed,
                step ? r.fn : nullptr};
  uint64_t held = find_held(key, x);
  const bool shared = held != 0;
  if (!shared) {
    if (step)
      held = pack_step_derivative(x, r);
    else if (quantizable)
      held = quantize(x, r);
    else
      held = pack_exact_bits(x, r, r.need == Need::Mask ? 1 : static_cast<int>(r.index_bits));
    by_key_[key] = held;
  }
  ++held_.at(held).refs;
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{held, r, x.shape(), x.dtype(), x.layout(), shared, x.storage()->id});
  return {this, id};
}

Tensor GroupStore::load(const SavedHandle& handle) {
  auto it = entries_.find(handle.id);
  PACKRAT_CHECK(it != entries_.end(), "{} store: saved tensor {} was already released (a second backward?)", scheme(),
                handle.id);
  const Entry& e = it->second;
  const Held& h = held_.at(e.held);
  if (auto src = h.source.lock(); src && src->version != h.version)
    fail("{} {}: a tensor saved for backward was modified in place after it was saved (version {}, saved at {}); "
         "use an out-of-place op",
         e.request.op, e.request.name, src->version, h.version);
  TagScope tag(MemTag::Workspace);  // a transient copy for the backward of one op
  if (h.form == Form::Quantized) {
    Tensor out = Tensor::empty(e.shape, DType::f32, e.layout);  // same shape and layout as saved
    dequantize_groups(h.codes.data<uint8_t>(), h.meta.data<uint8_t>(), h.geometry, out.data<float>());
    if (e.request.need == Need::Derivative) return pointwise_derivative(*e.request.fn, out);
    return out;
  }
  if (h.form == Form::StepMask) {
    const int64_t n = e.shape.numel();
    Tensor bits = Tensor::empty({n}, DType::u8);  // (numel,)
    unpack_bits(h.codes.data<uint8_t>(), n, 1, bits.data<uint8_t>());
    Tensor out = Tensor::empty(e.shape, DType::f32, e.layout);  // f'(x), same layout as x
    const uint8_t* m = bits.data<uint8_t>();
    float* o = out.data<float>();
    for (int64_t i = 0; i < n; ++i) o[i] = m[i] ? h.hi : h.lo;
    return out;
  }
  Tensor out = Tensor::empty(e.shape, e.dtype, e.layout);
  const int64_t n = out.numel();
  if (e.dtype == DType::u8) {
    unpack_bits(h.codes.data<uint8_t>(), n, h.bits, out.data<uint8_t>());
    return out;
  }
  Tensor codes = Tensor::empty({n}, DType::u8);  // (numel,)
  unpack_bits(h.codes.data<uint8_t>(), n, h.bits, codes.data<uint8_t>());
  const uint8_t* c = codes.data<uint8_t>();
  if (e.dtype == DType::i32) {
    int32_t* o = out.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) o[i] = c[i];
  } else {
    int64_t* o = out.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) o[i] = c[i];
  }
  return out;
}

void GroupStore::release(const SavedHandle& handle) {
  auto it = entries_.find(handle.id);
  if (it == entries_.end()) return;
  auto hit = held_.find(it->second.held);
  if (--hit->second.refs == 0) {
    auto bit = by_key_.find(hit->second.key);
    if (bit != by_key_.end() && bit->second == hit->first) by_key_.erase(bit);
    held_.erase(hit);
  }
  entries_.erase(it);
}

void GroupStore::note_grad_output(const SavedHandle& handle, const Tensor& grad_out) {
  auto it = entries_.find(handle.id);
  if (it == entries_.end() || !grad_out.defined()) return;
  const Held& h = held_.at(it->second.held);
  if (h.form != Form::Quantized || h.step != step_ || h.index < 0 || h.index >= static_cast<int64_t>(step_tensors_.size())) return;
  QuantizedTensorInfo& info = step_tensors_[static_cast<size_t>(h.index)];
  std::vector<double> g = per_sample_sq_norms(grad_out);  // (N,)
  const double factor = jacobian_factor(it->second.request.op, grad_out);
  for (double& v : g) v *= factor;
  if (static_cast<int64_t>(g.size()) != info.samples) {  // another batch layout: spread the total evenly
    double total = 0;
    for (double v : g) total += v;
    g.assign(static_cast<size_t>(info.samples), total / static_cast<double>(info.samples));
  }
  if (info.sample_grad_sq.empty())
    info.sample_grad_sq = std::move(g);
  else
    for (size_t i = 0; i < g.size(); ++i) info.sample_grad_sq[i] += g[i];  // a tensor read by two ops
}

void GroupStore::describe(std::vector<SavedRecord>& out) const {
  for (const auto& [id, e] : entries_) {
    const Held& h = held_.at(e.held);
    SavedRecord rec;
    rec.layer = e.request.name;
    rec.op = std::string(e.request.op);
    rec.scheme = std::string(scheme());
    rec.need = e.request.need;
    rec.bits = h.bits;
    rec.numel = e.shape.numel();
    rec.shared = e.shared;
    rec.fp32_key = e.fp32_key;
    rec.fp32_bytes = e.shared ? 0 : rec.numel * static_cast<int64_t>(dtype_size(e.dtype));
    rec.bytes = e.shared ? 0
                         : static_cast<int64_t>(h.codes.storage()->allocation->bytes()) +
                               (h.meta.defined() ? static_cast<int64_t>(h.meta.storage()->allocation->bytes()) : 0);
    out.push_back(std::move(rec));
  }
  exact_.describe(out);
}

}  // namespace packrat
