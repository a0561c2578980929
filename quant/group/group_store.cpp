#include "quant/group/group_store.h"

#include <algorithm>
#include <cstring>

#include "autograd/pointwise.h"
#include "core/noise_hash.h"  // splitmix64
#include "core/parallel.h"
#include "quant/bits/bitpack.h"

namespace packrat {

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
  rows_for(n, span, [&](int64_t s) {
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
  return 1.0 / static_cast<double>(per);
}

struct GroupStore::Quantized : Encoded {
  Tensor codes, meta;  // u8 (code bytes,), u8 (groups * meta bytes per group,)
  GroupGeometry geometry;
  CodecOrder order;  // how the codes walk the saved buffer, or a plain copy of it
  int64_t index = -1;  // position in step_tensors_
  int64_t step = 0;
  void payload(std::vector<PayloadSlot>& out) override {
    out.push_back({&codes});
    out.push_back({&meta});
  }
};

GroupStore::GroupStore(GroupStoreOptions o) : CompressingStore(Rules{}), opts_(o) { opts_.quant.check("per-group store"); }

GroupStoreOptions GroupStore::parse_options(SchemeOptions& o, const GroupStoreOptions& base) {
  GroupStoreOptions g = base;
  const GroupQuantConfig& q = base.quant;
  g.quant.bits = static_cast<int>(o.get_int("bits", q.bits, 1, 8));
  PACKRAT_CHECK(group_bits_supported(g.quant.bits),
                "{}: 'bits' is {}; per-group quantization supports 1, 2, 3, 4 or 8 bits", o.where(), g.quant.bits);
  g.quant.group_size = o.get_int("group_size", q.group_size, 1, int64_t{1} << 30);
  const std::string grouping =
      o.get_string("grouping", std::string(grouping_name(q.grouping)), {"per_sample", "per_plane", "flat"});
  g.quant.grouping = grouping == "flat" ? Grouping::Flat : grouping == "per_plane" ? Grouping::PerPlane : Grouping::PerSample;
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

std::unique_ptr<CompressingStore::Encoded> GroupStore::encode(const Tensor& x, const SaveRequest& r) {
  const int64_t index = next_index_++;
  GroupQuantConfig cfg = opts_.quant;
  if (provider_) cfg.bits = provider_->bits_for(index, r, x);
  PACKRAT_CHECK(group_bits_supported(cfg.bits), "{} {}: per-group quantization supports 1, 2, 3, 4 or 8 bits, got {}",
                r.op, r.name, cfg.bits);
  const int64_t samples = leading_samples(x);
  auto q = std::make_unique<Quantized>();
  q->bits = cfg.bits;
  q->geometry = group_geometry_of(x, cfg);
  q->order = codec_order(x, q->geometry);
  q->codes = Tensor::empty({q->geometry.code_bytes()}, DType::u8, Layout::Plain, MemTag::Saved,
                           x.device());  // (code bytes,)
  q->meta = Tensor::empty({q->geometry.meta_bytes()}, DType::u8, Layout::Plain, MemTag::Saved,
                          x.device());  // (groups * meta bytes per group,)
  const bool ranges = provider_ && provider_->wants_ranges();
  std::vector<double> group_range_sq;  // (groups,) where ranges
  const QuantNoise noise{noise_seed(index), quant_stream(static_cast<uint64_t>(step_), static_cast<uint64_t>(index))};
  quantize_groups(in_codec_order(x, q->order), q->geometry, cfg.rounding, noise, q->codes, q->meta,
                  ranges ? &group_range_sq : nullptr, q->order.walk);

  QuantizedTensorInfo info;
  info.index = index;
  info.layer = r.name;
  info.op = std::string(r.op);
  info.need = r.need;
  info.numel = x.numel();
  info.samples = samples;
  info.bits = cfg.bits;
  info.bytes = q->geometry.total_bytes();
  if (ranges) {
    info.sample_range_sq.assign(static_cast<size_t>(samples), 0.0);
    // Group g's sample, min(samples - 1, group_start(g) / per_sample), walked without a division a
    // group (two 64-bit divisions for each of a step's million groups of 32 were 2% of its time).
    const int64_t per_sample = std::max<int64_t>(1, x.numel() / samples);
    const GroupGeometry& geo = q->geometry;
    // Each sample's sum in a register, added in the groups' order as before (a sum kept in the
    // vector made every addition wait for the previous one's store).
    int64_t g = 0, sample = 0, next = per_sample;  // next: the first element of sample + 1
    double sum = 0.0;
    for (int64_t span = 0; span < geo.spans; ++span) {
      int64_t start = span * geo.span_len;
      for (int64_t i = 0; i < geo.groups_per_span; ++i, ++g, start += geo.group_size) {
        while (start >= next && sample < samples - 1) {
          info.sample_range_sq[static_cast<size_t>(sample)] += sum;
          sum = 0.0;
          ++sample;
          next += per_sample;
        }
        sum += group_range_sq[static_cast<size_t>(g)];
      }
    }
    info.sample_range_sq[static_cast<size_t>(sample)] += sum;
  }
  step_tensors_.push_back(std::move(info));
  q->index = index;
  q->step = step_;
  return q;
}

Tensor GroupStore::values(const Encoded& enc, const Entry& e) { return values_in(enc, e, DType::f32); }

Tensor GroupStore::values_in(const Encoded& enc, const Entry& e, DType dtype) {
  const auto& q = static_cast<const Quantized&>(enc);
  TagScope tag(MemTag::Workspace);  // a transient copy for the backward of one op, freed after it
  // Same shape and device as saved; the layout too, after a plain detour for via_plain codes.
  Tensor out = Tensor::empty(e.shape, dtype, q.order.via_plain ? Layout::Plain : e.layout, MemTag::Workspace,
                             q.codes.device());
  dequantize_groups(q.codes, q.meta, q.geometry, out, q.order.walk);
  return out.to_layout(e.layout);
}

Tensor GroupStore::apply_encoded(const Encoded& enc, const Entry& e, const Tensor& grad_out) {
  const auto& q = static_cast<const Quantized&>(enc);
  const CodecWalk& walk = q.order.walk;
  const bool device_walk = walk.channels == 0 || walk.nhwc;  // not the CPU's channel-blocked walk
  const bool fused = !q.codes.is_cpu() && e.request.need == Need::Derivative && !q.order.via_plain && device_walk &&
                     grad_out.dtype() == DType::f32 && grad_out.shape() == e.shape && grad_out.layout() == e.layout &&
                     grad_out.device() == q.codes.device();
  if (!fused) return CompressingStore::apply_encoded(enc, e, grad_out);
  const Pointwise& fn = *e.request.fn;
  Tensor gx = Tensor::empty_like(grad_out);
  dequantize_groups_apply(q.codes, q.meta, q.geometry, fn.id, fn.derivative_from_output != nullptr, grad_out, gx,
                          walk);
  return gx;
}

}  // namespace packrat
