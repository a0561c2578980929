#include "quant/mixed/mixed_store.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "autograd/pointwise.h"
#include "core/autocast.h"  // as_f32
#include "core/error.h"
#include "core/parallel.h"
#include "quant/group/group_quant.h"  // kMaxStagedGroup

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

struct MixedStore::Quantized : Encoded {
  MixedPacked packed;  // save_quantized
  Tensor reference;    // quantize_on_backward: the f32 tensor itself, tagged Saved while held
  MemTag original_tag = MemTag::Activation;
  MixedQuantConfig quant;  // as drawn at save (mix_prob included)
  QuantNoise noise;
  Device device;           // the saved tensor's: where the codes are held and decoded
  uint64_t reference_id = 0;  // the referenced tensor's storage (the offload layer may hold a copy instead)
  ~Quantized() override {
    // A referenced tensor still used elsewhere (the forward output the caller holds) goes back to its own account.
    if (reference.defined() && reference.storage()->id == reference_id && original_tag != MemTag::Parameter)
      reference.storage()->allocation->retag(original_tag);
  }
  void payload(std::vector<PayloadSlot>& out) override {
    out.push_back({&packed.codes});
    out.push_back({&packed.meta_data});
    out.push_back({&packed.flags});
    if (original_tag != MemTag::Parameter) out.push_back({&reference, original_tag});  // never a parameter
  }
};

MixedStore::MixedStore(MixedStoreOptions o) : CompressingStore(Rules{kMaxCodeBits, true, true}), options_(std::move(o)) {
  options_.check(fmt::format("{} store", options_.scheme));
  if (options_.label.empty())
    options_.label = options_.quant.base == options_.quant.mix
                         ? fmt::format("{}-bit", options_.quant.base.bits)
                         : fmt::format("{}/{}@{}", options_.quant.base.bits, options_.quant.mix.bits,
                                       options_.schedule.describe());
}

void MixedStore::count(const MixedPacked& p) {
  const BucketGeometry g = p.geometry();
  ++stats_.tensors;
  stats_.elements += p.numel;
  stats_.buckets += g.buckets;
  stats_.mix_buckets += p.mix_buckets;
  stats_.code_bytes += p.codes.defined() ? static_cast<int64_t>(p.codes.nbytes()) : 0;
  stats_.bytes += p.bytes();
}

namespace {

// The codec's input: x where the codec walks it in its logical (plain NCHW) order, the thesis's
// contiguous chunks of the activation (plain; the CPU's nChw16c or nChw8c; a GPU's NHWC where the kernels
// stage its buckets), else a transient plain copy, so that a bucket holds the same elements, and
// gets the same codes, in every layout.
Tensor in_logical_order(const Tensor& x, int64_t bucket_size) {
  if (!mixed_codec_order(x.shape(), x.layout(), x.device(), bucket_size).via_plain) return x;
  const TagScope scratch(MemTag::Workspace);
  return x.to_plain();
}

// Whether the codec reads a saved tensor of this dtype as it lies: f32, and bf16 on the CPU (the
// codes of its f32 values, converted as they are read) in buckets of up to kMaxStagedGroup values
// (StagedRuns' window). Else (f16, a GPU's bf16, longer buckets) the store hands it an f32 copy.
bool reads_as_is(DType dtype, Device device, int64_t bucket_size) {
  return dtype == DType::f32 || (dtype == DType::bf16 && device.is_cpu() && bucket_size <= kMaxStagedGroup);
}

}  // namespace

std::unique_ptr<CompressingStore::Encoded> MixedStore::encode(const Tensor& saved, const SaveRequest&) {
  const Tensor x = reads_as_is(saved.dtype(), saved.device(), options_.quant.bucket_size) ? saved : as_f32(saved);
  auto q = std::make_unique<Quantized>();
  q->quant = options_.quant;
  q->quant.mix_prob = options_.schedule.at(progress_);
  q->noise = QuantNoise{options_.seed, quant_stream(static_cast<uint64_t>(step_), tensor_index_++)};
  q->device = x.device();
  if (options_.mode == StorageMode::QuantizeOnBackward) {
    q->reference = x;
    q->reference_id = x.storage()->id;
    q->original_tag = x.storage()->allocation->tag();
    if (q->original_tag != MemTag::Parameter) x.storage()->allocation->retag(MemTag::Saved);
    return q;
  }
  const Tensor logical = in_logical_order(x, q->quant.bucket_size);
  TagScope tag(MemTag::Saved);
  q->packed = quantize_mixed(logical, q->quant, q->noise);
  count(q->packed);
  return q;
}

Tensor MixedStore::values(const Encoded& enc, const Entry& e) { return values_in(enc, e, DType::f32); }

Tensor MixedStore::values_in(const Encoded& enc, const Entry& e, DType dtype) {
  const auto& q = static_cast<const Quantized&>(enc);
  // bf16 on the CPU written by the codec (no f32 copy to convert); else f32, converted after
  if (!reads_as_is(dtype, q.device, q.quant.bucket_size)) return values(enc, e).to(dtype);
  TagScope tag(MemTag::Workspace);  // a transient copy for the backward of one op
  const bool via_plain = mixed_codec_order(e.shape, e.layout, q.device, q.quant.bucket_size).via_plain;
  const Layout walked = via_plain ? Layout::Plain : e.layout;  // reordered below if not
  Tensor out = Tensor::empty(e.shape, dtype, walked, MemTag::Workspace, q.device);
  if (options_.mode == StorageMode::SaveQuantized) {
    dequantize_mixed(q.packed, out);
  } else {  // quantize_on_backward: quantize now, with the keys drawn at save
    const MixedPacked p = quantize_mixed(in_logical_order(q.reference, q.quant.bucket_size), q.quant, q.noise);
    count(p);
    dequantize_mixed(p, out);
  }
  return out.to_layout(e.layout);  // the saved tensor's layout
}

Tensor MixedStore::apply_encoded(const Encoded& enc, const Entry& e, const Tensor& grad_out) {
  const auto& q = static_cast<const Quantized&>(enc);
  // The one pass reads the gradient in the saved tensor's layout, where the device kernels walk it
  // (plain, or an NHWC tensor whose buckets they stage).
  const bool fused = !q.device.is_cpu() && e.request.need == Need::Derivative && grad_out.dtype() == DType::f32 &&
                     grad_out.shape() == e.shape && grad_out.layout() == e.layout && grad_out.device() == q.device &&
                     !mixed_codec_order(e.shape, e.layout, q.device, q.quant.bucket_size).via_plain;
  if (!fused) return CompressingStore::apply_encoded(enc, e, grad_out);
  const Pointwise& fn = *e.request.fn;
  Tensor gx = Tensor::empty_like(grad_out);
  if (options_.mode == StorageMode::SaveQuantized) {
    dequantize_mixed_apply(q.packed, fn.id, fn.derivative_from_output != nullptr, grad_out, gx);
  } else {  // quantize_on_backward: quantize now, with the keys drawn at save (the codes are transient)
    const TagScope tag(MemTag::Workspace);
    const MixedPacked p = quantize_mixed(q.reference, q.quant, q.noise);  // in the gradient's layout
    count(p);
    dequantize_mixed_apply(p, fn.id, fn.derivative_from_output != nullptr, grad_out, gx);
  }
  return gx;
}

void MixedStore::begin_step(int64_t step) {
  std::lock_guard lock(mutex());
  step_ = step;
  tensor_index_ = 0;
  if (options_.total_steps > 0)
    progress_ = std::clamp(static_cast<double>(step) / static_cast<double>(options_.total_steps), 0.0, 1.0);
}

void MixedStore::set_progress(double fraction) {
  PACKRAT_CHECK(fraction >= 0.0 && fraction <= 1.0, "{} store: progress must be a fraction of training in [0, 1], got {}",
                options_.scheme, fraction);
  std::lock_guard lock(mutex());
  progress_ = fraction;
}

double MixedStore::progress() const {
  std::lock_guard lock(mutex());
  return progress_;
}

double MixedStore::current_mix_prob() const {
  std::lock_guard lock(mutex());
  return options_.schedule.at(progress_);
}

MixedStoreStats MixedStore::stats() const {
  std::lock_guard lock(mutex());
  return stats_;
}

void MixedStore::reset_stats() {
  std::lock_guard lock(mutex());
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
