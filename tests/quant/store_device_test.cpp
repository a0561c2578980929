// The compressing stores on a device. Without a GPU: on the emulated GPU
// (tests/support/emulated_gpu.h), whose codec kernels are the CPU's (the seam of
// quant/codec/codec_kernels.h), every request kind saved by the per-group store (actnn at 2, 4 and 8
// bits, stochastic and nearest, bf16 and f32 metadata; gact's per-tensor bits), the mixed /
// deterministic store, the fp8 store and the few-bit store gives the CPU store's forward values, loads and gradients bit for bit, the same describe()
// bytes, codes allocated on the device under the Saved tag, and no host access to device data.
// The statistical properties (unbiased stochastic rounding, exact masks, few-bit error bounds) are
// checked on device tensors. With a GPU: the same on cuda:0 (the GPU-only twins).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/pointwise.h"
#include "core/backend.h"
#include "core/philox.h"
#include "quant/store/compressing_store.h"
#include "quant/fewbit/fewbit_solver.h"
#include "quant/fewbit/fewbit_store.h"
#include "quant/fewbit/fewbit_table.h"
#include "quant/group/group_store.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/emulated_gpu.h"
#include "tests/support/gpu.h"
#include "tests/support/gradcheck.h"

namespace packrat {
namespace {

using testing::EmulatedGpu;
using testing::random_tensor;

// ---- one scenario: every request kind a store serves, on one device ---------------------------

struct Inputs {
  Tensor x, g, sig_y, mask, idx8, idx64, targets;  // CPU tensors
  Inputs() {
    DeviceScope on_cpu(Device::cpu());  // whichever test makes them first
    x = random_tensor({4, 3, 9, 11}, 41, -3.0f, 3.0f);  // (N, C, H, W): groups with tails
    float* p = x.data<float>();
    for (int64_t i = 0; i < x.numel(); i += 13) p[i] = i % 2 ? 0.0f : -0.0f;  // the relu family's kink
    g = random_tensor(x.shape(), 42);
    sig_y = backend_of(x).pointwise_forward(ActivationId::sigmoid, x);  // handed to save(), as an op does
    mask = Tensor::empty(x.shape(), DType::u8);
    idx8 = Tensor::empty({4, 3, 5, 5}, DType::u8);  // max-pool argmax in a 3x3 window: 4 bits
    idx64 = Tensor::empty({4, 3, 5, 5}, DType::i64);
    targets = Tensor::empty({4}, DType::i64);  // cross-entropy targets of 10 classes: 4 bits
    PhiloxStream s(43, 1);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<uint8_t>()[i] = s.uniform() < 0.7f;
    for (int64_t i = 0; i < idx8.numel(); ++i) {
      idx8.data<uint8_t>()[i] = static_cast<uint8_t>(s.below(9));
      idx64.data<int64_t>()[i] = static_cast<int64_t>(s.below(9));
    }
    for (int64_t i = 0; i < 4; ++i) targets.data<int64_t>()[i] = static_cast<int64_t>(s.below(10));
  }
};

const Inputs& inputs() {
  static const Inputs in;
  return in;
}

struct Out {
  std::string what;
  std::vector<uint8_t> bytes;  // the tensor's bytes, on the host
  DType dtype = DType::f32;
  bool device_math = false;  // computed by the device's own f / f' (a GPU may differ in the last bit)
};

struct Result {
  std::vector<Out> outs;
  std::vector<SavedRecord> records;
  int64_t saved_bytes = 0;  // the device allocator's Saved tag while everything is held
  std::vector<std::vector<double>> range_sq;  // gact: per quantized tensor, its per-sample variance bounds
};

Out out_of(std::string what, const Tensor& t, Device d, bool device_math = false) {
  EXPECT_EQ(t.device(), d) << what << " came back on another device";
  const Tensor h = t.to(Device::cpu()).to_plain();
  Out o{std::move(what), std::vector<uint8_t>(h.nbytes()), h.dtype(), device_math};
  if (h.nbytes()) std::memcpy(o.bytes.data(), h.raw(), h.nbytes());
  return o;
}

SaveRequest request(Need need, const char* op, const char* layer, const char* fn = nullptr, int64_t index_bits = 0) {
  SaveRequest r;
  r.need = need;
  r.op = op;
  r.name = layer;
  r.fn = fn ? &pointwise_by_name(fn) : nullptr;
  r.index_bits = index_bits;
  return r;
}

// Saves, describes, loads, applies and releases everything `store` serves, on device d.
// values_and_indices: the store takes Value and Index requests (per-group; not few-bit).
Result run_scenario(SavedTensorStore& store, Device d, bool values_and_indices) {
  const Inputs& in = inputs();
  DeviceScope on(d);
  Allocator& alloc = Allocator::of(d);
  const int64_t saved0 = alloc.current(MemTag::Saved);
  Result res;
  store.begin_step(3);
  const Tensor x = in.x.to(d), g = in.g.to(d);
  struct Kept {
    std::string what;
    SavedHandle h;
    bool derivative;
    bool device_math;  // the load computes f' on the device (the per-group store's f'(dequantized x))
  };
  std::vector<Kept> kept;
  auto keep = [&](std::string what, SavedHandle h, bool derivative, bool device_math = false) {
    kept.push_back({std::move(what), h, derivative, device_math});
  };
  const bool group = values_and_indices;
  if (values_and_indices) {
    keep("conv input", store.save(x, request(Need::Value, "conv2d", "conv1")), false);
    keep("the same input, shared", store.save(x, request(Need::Value, "conv2d", "conv2")), false);
  }
  for (const char* fn : {"gelu", "silu", "relu", "leaky_relu", "relu6"}) {
    const SaveRequest r = request(Need::Derivative, fn, "act", fn);
    auto [y, h] = store.forward_and_save(x, r);
    res.outs.push_back(out_of(std::string(fn) + " forward", y, d, !r.fn->derivative_is_step));
    keep(std::string(fn) + " (fused forward)", h, true, group && !r.fn->derivative_is_step);
  }
  keep("gelu (save of x)", store.save(x, request(Need::Derivative, "gelu", "act2", "gelu")), true, group);
  keep("sigmoid (save of y)", store.save(in.sig_y.to(d), request(Need::Derivative, "sigmoid", "act3", "sigmoid")), true,
       group);
  {
    const Tensor relu_y = backend_of(x).pointwise_forward(ActivationId::relu, x);
    keep("relu (save of y)", store.save(relu_y, request(Need::Derivative, "relu", "act4", "relu")), true);
  }
  keep("dropout mask", store.save(in.mask.to(d), request(Need::Mask, "dropout", "drop")), false);
  if (values_and_indices) {
    keep("max-pool indices u8", store.save(in.idx8.to(d), request(Need::Index, "maxpool2d", "pool", nullptr, 4)), false);
    keep("max-pool indices i64", store.save(in.idx64.to(d), request(Need::Index, "maxpool2d", "pool2", nullptr, 4)),
         false);
    keep("targets", store.save(in.targets.to(d), request(Need::Index, "cross_entropy", "loss", nullptr, 4)), false);
    // Targets of 1000 classes: the mixed store packs them at 10 bits (on the host), the per-group
    // store keeps them exact.
    keep("targets, 10 bits",
         store.save(in.targets.to(d), request(Need::Index, "cross_entropy", "loss2", nullptr, 10)), false);
  }
  store.describe(res.records);
  res.saved_bytes = alloc.current(MemTag::Saved) - saved0;
  if (auto* gs = dynamic_cast<GroupStore*>(&store))
    for (const QuantizedTensorInfo& t : gs->step_tensors()) res.range_sq.push_back(t.sample_range_sq);
  for (const Kept& k : kept) {
    {
      const Tensor loaded = store.load(k.h);
      res.outs.push_back(out_of(k.what + " load", loaded, d, k.device_math));
      if (group && k.what.starts_with("conv input")) {
        EXPECT_EQ(loaded.storage()->allocation->tag(), MemTag::Workspace) << "the decode of a conv input is transient";
      }
    }
    if (k.derivative) res.outs.push_back(out_of(k.what + " backward", store.apply_derivative(k.h, g), d, k.device_math));
  }
  for (const Kept& k : kept) store.release(k.h);
  EXPECT_EQ(store.live_count(), 0u);
  EXPECT_EQ(alloc.current(MemTag::Saved), saved0) << "everything held is released on the device";
  return res;
}

// n floats a GPU computed with its own f and f' (device) against the CPU's (cpu): to the last bits.
void expect_device_math_close(const float* device, const float* cpu, size_t n, const std::string& what) {
  for (size_t k = 0; k < n; ++k)
    ASSERT_NEAR(device[k], cpu[k], 1e-6f * (std::abs(cpu[k]) + 1e-3f)) << what << " element " << k;
}

// Float outputs computed by a GPU's own f and f' agree to the last bits; everything else exactly.
void expect_same(const Result& dev, const Result& cpu, bool gpu, const std::string& what) {
  ASSERT_EQ(dev.outs.size(), cpu.outs.size()) << what;
  for (size_t i = 0; i < cpu.outs.size(); ++i) {
    const Out &a = dev.outs[i], &b = cpu.outs[i];
    ASSERT_EQ(a.what, b.what);
    ASSERT_EQ(a.bytes.size(), b.bytes.size()) << what << ": " << b.what;
    if (gpu && b.device_math) {
      expect_device_math_close(reinterpret_cast<const float*>(a.bytes.data()),
                               reinterpret_cast<const float*>(b.bytes.data()), a.bytes.size() / 4, what + ": " + b.what);
    } else {
      EXPECT_TRUE(a.bytes == b.bytes) << what << ": " << b.what << " differs from the CPU store's";
    }
  }
  ASSERT_EQ(dev.records.size(), cpu.records.size()) << what;
  for (size_t i = 0; i < cpu.records.size(); ++i) {
    const SavedRecord &a = dev.records[i], &b = cpu.records[i];
    const std::string w = what + ": record " + std::to_string(i) + " " + b.op + " " + b.layer;
    EXPECT_EQ(a.layer, b.layer) << w;
    EXPECT_EQ(a.op, b.op) << w;
    EXPECT_EQ(a.scheme, b.scheme) << w;
    EXPECT_EQ(a.need, b.need) << w;
    EXPECT_EQ(a.bits, b.bits) << w;
    EXPECT_EQ(a.bytes, b.bytes) << w;
    EXPECT_EQ(a.fp32_bytes, b.fp32_bytes) << w;
    EXPECT_EQ(a.numel, b.numel) << w;
    EXPECT_EQ(a.shared, b.shared) << w;
  }
  EXPECT_EQ(dev.saved_bytes, cpu.saved_bytes) << what << ": the device allocator's Saved bytes";
  EXPECT_EQ(dev.range_sq, cpu.range_sq) << what << ": gact's variance bounds";
}

struct GroupCase {
  int bits;
  Rounding rounding;
  MetaType meta;
  std::string name() const {
    return "actnn " + std::to_string(bits) + " bits " + std::string(rounding_name(rounding)) + " " +
           std::string(meta_name(meta));
  }
  GroupStoreOptions options() const {
    GroupStoreOptions o;
    o.quant.bits = bits;
    o.quant.rounding = rounding;
    o.quant.meta = meta;
    o.quant.group_size = 64;  // groups with tails in a (3, 9, 11) sample
    o.seed = 17;
    return o;
  }
};

std::vector<GroupCase> group_cases() {
  std::vector<GroupCase> out;
  for (int bits : {2, 4, 8})
    for (Rounding r : {Rounding::Stochastic, Rounding::Nearest})
      for (MetaType m : {MetaType::BF16, MetaType::F32}) out.push_back({bits, r, m});
  return out;
}

// GACT's per-tensor bits: each tensor quantized at its own width, with its variance bounds.
class CyclingBits : public BitsProvider {
 public:
  int bits_for(int64_t index, const SaveRequest&, const Tensor&) override {
    static constexpr int kBits[] = {2, 4, 8, 3, 1};
    return kBits[index % 5];
  }
};

void expect_group_stores_match_the_cpu(Device d, bool gpu) {
  for (const GroupCase& k : group_cases()) {
    GroupStore on_cpu(k.options()), on_dev(k.options());
    expect_same(run_scenario(on_dev, d, true), run_scenario(on_cpu, Device::cpu(), true), gpu, k.name());
  }
  CyclingBits provider;
  GroupStore on_cpu(GroupCase{2, Rounding::Stochastic, MetaType::BF16}.options());
  GroupStore on_dev(GroupCase{2, Rounding::Stochastic, MetaType::BF16}.options());
  on_cpu.set_bits_provider(&provider);
  on_dev.set_bits_provider(&provider);
  expect_same(run_scenario(on_dev, d, true), run_scenario(on_cpu, Device::cpu(), true), gpu, "gact");
}

// The mixed and deterministic bucket quantizers (quant/mixed/mixed_quant.h), as configs write them:
// per-bucket and per-tensor 2/4-bit decisions, affine and max-abs scales, quantize-on-backward,
// the deterministic scheme's nearest rounding; buckets of 64 (with tails).
std::vector<SchemeSpec> mixed_cases() {
  using Options = std::map<std::string, std::string>;
  const Options common{{"bucket_size", "64"}};
  auto spec = [&](const std::string& scheme, Options more) {
    more.insert(common.begin(), common.end());
    return SchemeSpec{scheme, std::move(more), "store_device_test"};
  };
  return {spec("mixed", {{"preset", "2/4@0.5"}}),
          spec("mixed", {{"preset", "2/4@0.5"}, {"decision", "per_tensor"}}),
          spec("mixed", {{"preset", "2/4@0.5"}, {"scale", "maxabs"}}),
          spec("mixed", {{"preset", "2/4@0.5"}, {"mode", "quantize_on_backward"}}),
          spec("deterministic", {{"bits", "4"}})};
}

void expect_mixed_stores_match_the_cpu(Device d, bool gpu) {
  for (const SchemeSpec& spec : mixed_cases()) {
    std::string name = spec.scheme;
    for (const auto& [k, v] : spec.options) name += " " + k + "=" + v;
    const std::unique_ptr<SavedTensorStore> on_cpu = make_store(spec, 23), on_dev = make_store(spec, 23);
    const Result dev = run_scenario(*on_dev, d, true);
    expect_same(dev, run_scenario(*on_cpu, Device::cpu(), true), gpu, name);
    // The 1000-class targets are packed at 10 bits (staged through the host): 4 targets, 5 bytes.
    for (const SavedRecord& r : dev.records)
      if (r.layer == "loss2") {
        EXPECT_EQ(r.bytes, 5) << name;
      }
  }
}

// The fp8 store (quant/fp8/fp8_store.h): both formats, one scale per tensor and per group of 64
// (with tails) or 1.
void expect_fp8_stores_match_the_cpu(Device d, bool gpu) {
  using Options = std::map<std::string, std::string>;
  for (const char* format : {"e4m3", "e5m2"})
    for (Options scale : {Options{{"scale", "per_tensor"}}, Options{{"group_size", "64"}}, Options{{"group_size", "1"}}}) {
      scale["format"] = format;
      const SchemeSpec spec{"fp8", scale, "store_device_test"};
      std::string name = spec.scheme;
      for (const auto& [k, v] : spec.options) name += " " + k + "=" + v;
      const std::unique_ptr<SavedTensorStore> on_cpu = make_store(spec, 23), on_dev = make_store(spec, 23);
      expect_same(run_scenario(*on_dev, d, true), run_scenario(*on_cpu, Device::cpu(), true), gpu, name);
    }
}

void expect_fewbit_stores_match_the_cpu(Device d, bool gpu) {
  for (int bits : {1, 2, 3, 4}) {
    FewbitStore on_cpu({bits, {}}), on_dev({bits, {}});
    expect_same(run_scenario(on_dev, d, false), run_scenario(on_cpu, Device::cpu(), false), gpu,
                "fewbit " + std::to_string(bits));
  }
}

// ---- statistical properties, on device tensors --------------------------------------------------

// Stochastic rounding is unbiased: over many steps (fresh noise each), the mean of the loaded
// values is within 5 sigma of x, sigma^2 <= step^2 / 4 per draw.
void expect_unbiased(Device d) {
  constexpr int kDraws = 600;
  const Tensor x = random_tensor({2, 128}, 51, -1.3f, 2.1f);
  for (int bits : {1, 2, 4}) {
    GroupStoreOptions o;
    o.quant.bits = bits;
    o.quant.group_size = 64;
    o.quant.meta = MetaType::F32;
    GroupStore store(o);
    DeviceScope on(d);
    const Tensor xd = x.to(d);
    std::vector<double> sum(static_cast<size_t>(x.numel()), 0.0);
    for (int s = 0; s < kDraws; ++s) {
      store.begin_step(s);
      const SavedHandle h = store.save(xd, request(Need::Value, "linear", "fc"));
      const std::vector<float> v = store.load(h).to(Device::cpu()).to_vector();
      store.release(h);
      for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
    }
    const std::vector<float> xv = x.to_vector();
    for (size_t i = 0; i < xv.size(); ++i) {
      float mn = xv[i / 64 * 64], mx = mn;
      for (size_t k = i / 64 * 64; k < i / 64 * 64 + 64; ++k) mn = std::min(mn, xv[k]), mx = std::max(mx, xv[k]);
      const double step = (mx - mn) / ((1 << bits) - 1), bound = step * step / 4.0 * 1.001;
      ASSERT_NEAR(sum[i] / kDraws, xv[i], 5.0 * std::sqrt(bound / kDraws) + 1e-6)
          << d.str() << " bits " << bits << " element " << i;
    }
  }
}

// Masks are exact: a step derivative's gradient is grad * f'(x) exactly (per-group and few-bit
// stores), a dropout mask and max-pool indices come back as saved.
void expect_exact_masks(Device d) {
  const Inputs& in = inputs();
  DeviceScope on(d);
  GroupStore actnn(GroupCase{2, Rounding::Stochastic, MetaType::BF16}.options());
  FewbitStore fewbit({3, {}});
  const std::vector<float> xv = in.x.to_vector(), gv = in.g.to_vector();
  for (SavedTensorStore* s : std::vector<SavedTensorStore*>{&actnn, &fewbit}) {
    for (const char* name : {"relu", "leaky_relu", "relu6"}) {
      const SaveRequest r = request(Need::Derivative, name, "act", name);
      auto [y, h] = s->forward_and_save(in.x.to(d), r);
      const std::vector<float> gx = s->apply_derivative(h, in.g.to(d)).to(Device::cpu()).to_vector();
      for (size_t i = 0; i < xv.size(); ++i)
        ASSERT_EQ(gx[i], gv[i] * r.fn->df(xv[i])) << d.str() << " " << s->scheme() << " " << name << " " << i;
      s->release(h);
    }
    const SavedHandle hm = s->save(in.mask.to(d), request(Need::Mask, "dropout", "drop"));
    const Tensor m = s->load(hm).to(Device::cpu());
    ASSERT_EQ(std::memcmp(m.raw(), in.mask.raw(), in.mask.nbytes()), 0) << d.str() << " " << s->scheme();
    s->release(hm);
  }
  const SavedHandle hi = actnn.save(in.idx64.to(d), request(Need::Index, "maxpool2d", "pool", nullptr, 4));
  const Tensor idx = actnn.load(hi).to(Device::cpu());
  ASSERT_EQ(std::memcmp(idx.raw(), in.idx64.raw(), in.idx64.nbytes()), 0) << d.str();
  actnn.release(hi);
  // A value its bits cannot hold is found on the device too, naming the element.
  SaveRequest narrow = request(Need::Index, "maxpool2d", "pool", nullptr, 3);
  std::string m;
  try {
    actnn.save(in.idx64.to(d), narrow);
  } catch (const Error& e) {
    m = e.what();
  }
  int64_t first = -1;
  for (int64_t i = 0; i < in.idx64.numel() && first < 0; ++i)
    if (in.idx64.data<int64_t>()[i] >= 8) first = i;
  EXPECT_EQ(m, "maxpool2d pool: index element " + std::to_string(first) +
                   " does not fit in 3 bit(s) (a index request must hold values in [0, 8))")
      << d.str();
  EXPECT_EQ(actnn.live_count(), 0u);
}

// The few-bit store's loaded derivative has exactly its table's error (Eq. 3, uniform weight on
// [-10, 10]: 20 x the mean square error).
void expect_fewbit_error_bounds(Device d) {
  const Tensor x = random_tensor({1 << 16}, 31, -10.0f, 10.0f);
  const std::vector<float> xs = x.to_vector();
  DeviceScope on(d);
  for (const char* fn : {"gelu", "sigmoid"})
    for (int bits : {1, 3}) {
      FewbitStore store({bits, {}});
      auto [y, h] = store.forward_and_save(x.to(d), request(Need::Derivative, fn, "act", fn));
      const std::vector<float> q = store.load(h).to(Device::cpu()).to_vector();
      const FewbitFunction& f = fewbit_function(fn);
      double mse = 0;
      for (size_t i = 0; i < xs.size(); ++i) mse += std::pow(q[i] - f.df(xs[i]), 2);
      mse /= static_cast<double>(xs.size());
      const double e = fewbit_table(fn, bits).error;
      EXPECT_NEAR(mse * 20, e, 0.05 * e) << d.str() << " " << fn << " " << bits;
      store.release(h);
    }
}

// The same logical tensor gets the same per-group codes on the CPU and on device d whatever the
// grouping, when d holds it plain (on a GPU: NCHW, PACKRAT_CUDA_LAYOUT=nchw) and the CPU blocked
// (nChw16c, what its convolutions make): the CPU walks its buffer in plain order.
void expect_cpu_blocked_groups_match_plain_groups_on(Device d) {
  const Tensor host = random_tensor({3, 32, 7, 9}, 67, -3.0f, 3.0f);  // (N, C, H, W): planes of 63
  for (Grouping grouping : {Grouping::PerSample, Grouping::PerPlane, Grouping::Flat}) {
    const std::string what(grouping_name(grouping));
    GroupStoreOptions o = GroupCase{2, Rounding::Stochastic, MetaType::BF16}.options();
    o.quant.grouping = grouping;
    o.quant.group_size = 100;  // groups across planes and across the CPU's 16-channel tiles
    GroupStore cpu_store(o), device_store(o);
    const SavedHandle hc = cpu_store.save(host.to_layout(Layout::nChw16c), request(Need::Value, "conv2d", "c"));
    const std::vector<float> on_cpu = cpu_store.load(hc).to_plain().to_vector();
    std::vector<float> on_device;
    {
      DeviceScope on(d);
      const SavedHandle hd = device_store.save(host.to(d), request(Need::Value, "conv2d", "c"));
      on_device = device_store.load(hd).to(Device::cpu()).to_vector();
    }
    EXPECT_EQ(on_cpu, on_device) << what;
    std::vector<SavedRecord> cpu_records, device_records;
    cpu_store.describe(cpu_records);
    device_store.describe(device_records);
    ASSERT_EQ(cpu_records.size(), 1u);
    ASSERT_EQ(device_records.size(), 1u);
    EXPECT_EQ(cpu_records[0].bytes, device_records[0].bytes) << what;
  }
}

// Buckets hold the same elements of a tensor in every layout (quant/mixed/mixed_store.h): the CPU's
// blocked tensor (nChw16c) and device d's in `layout` (a GPU's NHWC; plain on the emulated GPU,
// whose layouts are the CPU's) load the same values and apply the same derivative, from the same
// bytes, for every mixed case (a GPU's own f' within the last bits, as expect_same).
void expect_mixed_buckets_match_across_layouts(Device d, Layout layout, bool gpu, const Shape& shape = {2, 32, 9, 7}) {
  const Tensor host = random_tensor(shape, 68, -3.0f, 3.0f);  // (N, C, H, W): planes of 63 by default
  const Tensor grad = random_tensor(host.shape(), 69);
  for (const SchemeSpec& spec : mixed_cases()) {
    std::string name = spec.scheme;
    for (const auto& [k, v] : spec.options) name += " " + k + "=" + v;
    const std::unique_ptr<SavedTensorStore> cpu_store = make_store(spec, 5), device_store = make_store(spec, 5);
    const SaveRequest value = request(Need::Value, "conv2d", "c");
    const SaveRequest derivative = request(Need::Derivative, "gelu", "act", "gelu");
    const Tensor blocked = host.to_layout(Layout::nChw16c);
    const SavedHandle vc = cpu_store->save(blocked, value), dc = cpu_store->save(blocked, derivative);
    const std::vector<float> cpu_value = cpu_store->load(vc).to_plain().to_vector();
    const std::vector<float> cpu_grad =
        cpu_store->apply_derivative(dc, grad.to_layout(Layout::nChw16c)).to_plain().to_vector();
    std::vector<float> device_value, device_grad;
    {
      DeviceScope on(d);
      const Tensor x = backend(d).to_layout(host.to(d), layout);
      const SavedHandle vd = device_store->save(x, value), dd = device_store->save(x, derivative);
      const Tensor loaded = device_store->load(vd);
      const Tensor gx = device_store->apply_derivative(dd, backend(d).to_layout(grad.to(d), layout));
      EXPECT_EQ(loaded.layout(), layout) << name;
      EXPECT_EQ(gx.layout(), layout) << name;
      device_value = backend(d).to_layout(loaded, Layout::Plain).to(Device::cpu()).to_vector();
      device_grad = backend(d).to_layout(gx, Layout::Plain).to(Device::cpu()).to_vector();
    }
    EXPECT_EQ(cpu_value, device_value) << name;
    if (gpu) {
      ASSERT_EQ(cpu_grad.size(), device_grad.size()) << name;
      expect_device_math_close(device_grad.data(), cpu_grad.data(), cpu_grad.size(), name);
    } else {
      EXPECT_EQ(cpu_grad, device_grad) << name;
    }
    std::vector<SavedRecord> cpu_records, device_records;
    cpu_store->describe(cpu_records);
    device_store->describe(device_records);
    ASSERT_EQ(cpu_records.size(), 2u) << name;
    ASSERT_EQ(device_records.size(), 2u) << name;
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(cpu_records[i].bytes, device_records[i].bytes) << name;
  }
}

// ---- on the emulated GPU (always) ---------------------------------------------------------------

TEST(StoreDevice, PerGroupStoresOnTheDeviceGiveTheCpuStoresResultsAndBytes) {
  EmulatedGpu gpu;
  expect_group_stores_match_the_cpu(EmulatedGpu::device(), false);
  EXPECT_EQ(gpu.allocator().current(MemTag::Saved), 0);
  EXPECT_EQ(gpu.allocator().current(MemTag::Workspace), 0);
}

TEST(StoreDevice, GroupsOfACpuBlockedTensorAreThoseOfThePlainTensorOnADevice) {
  EmulatedGpu gpu;
  expect_cpu_blocked_groups_match_plain_groups_on(EmulatedGpu::device());
}

TEST(StoreDevice, BucketsOfACpuBlockedTensorAreThoseOfThePlainTensorOnADevice) {
  EmulatedGpu gpu;
  expect_mixed_buckets_match_across_layouts(EmulatedGpu::device(), Layout::Plain, false);
  EXPECT_EQ(gpu.allocator().current(MemTag::Workspace), 0);
}

TEST(StoreDevice, FewbitStoresOnTheDeviceGiveTheCpuStoresResultsAndBytes) {
  EmulatedGpu gpu;
  expect_fewbit_stores_match_the_cpu(EmulatedGpu::device(), false);
  EXPECT_EQ(gpu.allocator().current(MemTag::Saved), 0);
}

TEST(StoreDevice, MixedAndDeterministicStoresOnTheDeviceGiveTheCpuStoresResultsAndBytes) {
  EmulatedGpu gpu;
  expect_mixed_stores_match_the_cpu(EmulatedGpu::device(), false);
  EXPECT_EQ(gpu.allocator().current(MemTag::Saved), 0);
  EXPECT_EQ(gpu.allocator().current(MemTag::Workspace), 0);
}

TEST(StoreDevice, Fp8StoresOnTheDeviceGiveTheCpuStoresResultsAndBytes) {
  EmulatedGpu gpu;
  expect_fp8_stores_match_the_cpu(EmulatedGpu::device(), false);
}

TEST(StoreDevice, CodesAreHeldOnTheDeviceUnderTheSavedTag) {
  EmulatedGpu gpu;
  const Device d = EmulatedGpu::device();
  GroupStore store(GroupCase{2, Rounding::Stochastic, MetaType::BF16}.options());
  DeviceScope on(d);
  const int64_t cpu_saved = Allocator::cpu().current(MemTag::Saved);
  const Tensor x = inputs().x.to(d);
  const SavedHandle h = store.save(x, request(Need::Value, "conv2d", "conv1"));
  const SavedHandle hm = store.save(inputs().mask.to(d), request(Need::Mask, "dropout", "drop"));
  std::vector<SavedRecord> recs;
  store.describe(recs);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(gpu.allocator().current(MemTag::Saved), recs[0].bytes + recs[1].bytes);
  EXPECT_EQ(recs[1].bytes, (x.numel() + 7) / 8);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Saved), cpu_saved) << "nothing is kept on the host";
  {
    // The decode of a compressed input lands in a Workspace tensor on the device, freed after use.
    const int64_t ws = gpu.allocator().current(MemTag::Workspace);
    const Tensor loaded = store.load(h);
    EXPECT_EQ(gpu.allocator().current(MemTag::Workspace), ws + x.numel() * 4);
  }
  EXPECT_EQ(gpu.allocator().current(MemTag::Workspace), 0);
  store.release(h);
  store.release(hm);
  EXPECT_EQ(gpu.allocator().current(MemTag::Saved), 0);
}

// A codec that reads its input on the host (as a scheme of your own may): its store does not say
// codec_on_devices, so a device tensor is refused before anything is made there, masks included.
class HostOnlyStore : public CompressingStore {
 public:
  HostOnlyStore() : CompressingStore(Rules{}) {}
  std::string_view scheme() const override { return "host_only"; }

 protected:
  struct Copy : Encoded {
    Tensor t;
    void payload(std::vector<PayloadSlot>& out) override { out.push_back({&t}); }
  };
  std::unique_ptr<Encoded> encode(const Tensor& x, const SaveRequest&) override {
    auto c = std::make_unique<Copy>();
    c->t = Tensor::from_vector(x.shape(), x.to_vector());  // host access
    return c;
  }
  Tensor decode(const Encoded& enc, const Entry&) override { return static_cast<const Copy&>(enc).t.clone(); }
};

TEST(StoreDevice, ACodecThatDoesNotRunOnDevicesRefusesDeviceTensors) {
  EmulatedGpu gpu;
  const Device d = EmulatedGpu::device();
  HostOnlyStore store;
  for (const SaveRequest& r : {request(Need::Value, "conv2d", "conv1"), request(Need::Derivative, "relu", "act", "relu")}) {
    std::string m;
    try {
      store.save(inputs().x.to(d), r);
    } catch (const Error& e) {
      m = e.what();
    }
    EXPECT_EQ(m, "host_only: this scheme's codec has no GPU kernels, so nothing is compressed on "
                 "cuda:1000: " + std::string(r.op) + " " + r.name +
                     " (4, 3, 9, 11) f32 plain on cuda:1000 cannot be compressed there (save it with the fp32 scheme, "
                     "or run on the CPU)");
  }
  EXPECT_EQ(store.live_count(), 0u);
  EXPECT_EQ(gpu.allocator().current(MemTag::Saved), 0);
  SaveRequest exact = request(Need::Value, "batchnorm2d", "bn1");
  exact.exact = true;
  const SavedHandle h = store.save(inputs().x.to(d), exact);  // exact requests pass through, on any device
  EXPECT_EQ(store.load(h).device(), d);
  store.release(h);
}

TEST(StoreDevice, StochasticRoundingIsUnbiasedOnDeviceTensors) {
  EmulatedGpu gpu;
  expect_unbiased(EmulatedGpu::device());
}

TEST(StoreDevice, MasksAndIndicesAreExactOnDeviceTensors) {
  EmulatedGpu gpu;
  expect_exact_masks(EmulatedGpu::device());
}

TEST(StoreDevice, FewbitLoadsHaveTheTableErrorOnDeviceTensors) {
  EmulatedGpu gpu;
  expect_fewbit_error_bounds(EmulatedGpu::device());
}

// ---- on a GPU (skip without one) -----------------------------------------------------------------

TEST(StoreCuda, PerGroupStoresOnTheGpuGiveTheCpuStoresResultsAndBytes) {
  PACKRAT_SKIP_WITHOUT_GPU();
  expect_group_stores_match_the_cpu(Device::cuda(0), true);
}

TEST(StoreCuda, MixedAndDeterministicStoresOnTheGpuGiveTheCpuStoresResultsAndBytes) {
  PACKRAT_SKIP_WITHOUT_GPU();
  expect_mixed_stores_match_the_cpu(Device::cuda(0), true);
}

TEST(StoreCuda, Fp8StoresOnTheGpuGiveTheCpuStoresResultsAndBytes) {
  PACKRAT_SKIP_WITHOUT_GPU();
  expect_fp8_stores_match_the_cpu(Device::cuda(0), true);
}

TEST(StoreCuda, FewbitStoresOnTheGpuGiveTheCpuStoresResultsAndBytes) {
  PACKRAT_SKIP_WITHOUT_GPU();
  expect_fewbit_stores_match_the_cpu(Device::cuda(0), true);
}

// The groupings and shapes of the NHWC tests: planes of 99, 1024, 64 and 49 (taken in plain order
// by the kernels: quant/group/nhwc_tile.h, quant/group/nhwc_decode.h) and of 1600 (over a tile's 1024:
// quantized through a plain copy).
struct NhwcCase {
  Shape shape;
  Grouping grouping;
  int64_t group_size;
};
std::vector<NhwcCase> nhwc_cases() {
  std::vector<NhwcCase> cases;
  for (Grouping grouping : {Grouping::PerPlane, Grouping::PerSample, Grouping::Flat}) {
    cases.push_back({Shape{4, 3, 9, 11}, grouping, 32});
    cases.push_back({Shape{2, 8, 32, 32}, grouping, 256});
    cases.push_back({Shape{3, 12, 8, 8}, grouping, 256});
    cases.push_back({Shape{2, 20, 7, 7}, grouping, 64});
    cases.push_back({Shape{2, 3, 40, 40}, grouping, 256});
  }
  return cases;
}
std::string nhwc_case_name(const NhwcCase& k) {
  return fmt::format("{} {} groups of {}", k.shape.str(), grouping_name(k.grouping), k.group_size);
}
GroupStoreOptions nhwc_case_options(const NhwcCase& k) {
  GroupStoreOptions o = GroupCase{2, Rounding::Stochastic, MetaType::BF16}.options();
  o.quant.grouping = k.grouping;
  o.quant.group_size = k.group_size;
  return o;
}

// Groups are the plain tensor's whatever the layout: an NHWC tensor (what the CUDA backend's
// convolutions make) is quantized to the bytes of its plain copy under every grouping, and loads
// back in NHWC.
TEST(StoreCuda, GroupsOfAnNhwcTensorAreThePlainTensors) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Device d = Device::cuda(0);
  for (const NhwcCase& k : nhwc_cases()) {
    const Tensor host = random_tensor(k.shape, 61, -3.0f, 3.0f);  // (N, C, H, W)
    GroupStore plain_store(nhwc_case_options(k)), nhwc_store(nhwc_case_options(k));
    DeviceScope on(d);
    const Tensor x = host.to(d);  // plain
    const SavedHandle hp = plain_store.save(x, request(Need::Value, "conv2d", "c"));
    const SavedHandle hn = nhwc_store.save(backend(d).to_layout(x, Layout::NHWC), request(Need::Value, "conv2d", "c"));
    const Tensor loaded = nhwc_store.load(hn);
    EXPECT_EQ(loaded.layout(), Layout::NHWC) << nhwc_case_name(k);
    EXPECT_EQ(backend(d).to_layout(loaded, Layout::Plain).to(Device::cpu()).to_vector(),
              plain_store.load(hp).to(Device::cpu()).to_vector())
        << nhwc_case_name(k);
    std::vector<SavedRecord> nhwc_records, plain_records;
    nhwc_store.describe(nhwc_records);
    plain_store.describe(plain_records);
    ASSERT_EQ(nhwc_records.size(), 1u);
    ASSERT_EQ(plain_records.size(), 1u);
    EXPECT_EQ(nhwc_records[0].bytes, plain_records[0].bytes) << nhwc_case_name(k);
  }
}

// The mixed store's buckets of a GPU's NHWC tensor are those of the CPU's blocked tensor: the same
// values, gradients and bytes; staged in plain order where the planes are of up to 1024 values
// (planes of 63), else through a plain copy (planes of 1600).
TEST(StoreCuda, BucketsOfAnNhwcTensorAreThoseOfTheCpuBlockedTensor) {
  PACKRAT_SKIP_WITHOUT_GPU();
  expect_mixed_buckets_match_across_layouts(Device::cuda(0), Layout::NHWC, true);
  expect_mixed_buckets_match_across_layouts(Device::cuda(0), Layout::NHWC, true, {2, 16, 40, 40});
}

TEST(StoreCuda, GroupsOfACpuBlockedTensorAreThoseOfTheGpuPlainTensor) {
  PACKRAT_SKIP_WITHOUT_GPU();
  expect_cpu_blocked_groups_match_plain_groups_on(Device::cuda(0));
}

// An activation's backward from the codes of an NHWC tensor (one pass where the groups are staged:
// the block stages the gradient through shared memory) gives the plain tensor's gradient, in NHWC.
TEST(StoreCuda, CodesOfAnNhwcTensorApplyTheDerivativeAsThePlainTensors) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Device d = Device::cuda(0);
  for (const NhwcCase& k : nhwc_cases()) {
    const Tensor host = random_tensor(k.shape, 71, -3.0f, 3.0f), grad = random_tensor(k.shape, 72, -1.0f, 1.0f);
    GroupStore plain_store(nhwc_case_options(k)), nhwc_store(nhwc_case_options(k));
    DeviceScope on(d);
    const SaveRequest r = request(Need::Derivative, "gelu", "act", "gelu");
    const SavedHandle hp = plain_store.save(host.to(d), r);
    const SavedHandle hn = nhwc_store.save(backend(d).to_layout(host.to(d), Layout::NHWC), r);
    const Tensor gp = plain_store.apply_derivative(hp, grad.to(d));
    const Tensor gn = nhwc_store.apply_derivative(hn, backend(d).to_layout(grad.to(d), Layout::NHWC));
    EXPECT_EQ(gn.layout(), Layout::NHWC) << nhwc_case_name(k);
    EXPECT_EQ(backend(d).to_layout(gn, Layout::Plain).to(Device::cpu()).to_vector(), gp.to(Device::cpu()).to_vector())
        << nhwc_case_name(k);
  }
}

TEST(StoreCuda, StochasticRoundingIsUnbiasedOnGpuTensors) {
  PACKRAT_SKIP_WITHOUT_GPU();
  expect_unbiased(Device::cuda(0));
}

TEST(StoreCuda, MasksAndIndicesAreExactOnGpuTensors) {
  PACKRAT_SKIP_WITHOUT_GPU();
  expect_exact_masks(Device::cuda(0));
}

TEST(StoreCuda, FewbitLoadsHaveTheTableErrorOnGpuTensors) {
  PACKRAT_SKIP_WITHOUT_GPU();
  expect_fewbit_error_bounds(Device::cuda(0));
}

}  // namespace
}  // namespace packrat
