// Autocast (core/autocast.h): under AutocastScope(bf16) the lower-precision ops compute in bf16, activations
// flow and are saved in it, gradients and parameters stay f32; the other ops follow their input's dtype;
// compressing stores encode 16-bit inputs as their f32 values; a checkpoint segment recomputes under the
// forward's autocast; a bf16 step matches PyTorch's autocast step; the CPU's pointwise kernels read
// bf16 as its f32 values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "autograd/checkpoint.h"
#include "autograd/fp32_store.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "core/backend.h"
#include "core/cpu/layout.h"  // native_blocked_layout
#include "experiments/lib/safetensors.h"
#include "quant/policy/rule_policy.h"
#include "tests/models/golden_file.h"
#include "tests/support/emulated_gpu.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::random_tensor;

namespace {

Tensor parameter(const Shape& s, uint64_t seed, float scale) {
  TagScope tag(MemTag::Parameter);
  return random_tensor(s, seed, -scale, scale).set_requires_grad();
}

// x rounded to bf16 and back: the values a bf16 kernel reads.
Tensor bf16_rounded(const Tensor& x) { return x.to(DType::bf16).to(DType::f32); }

Tensor ones(const Shape& s) { return Tensor::full(s, 1.0f); }

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    den += want[i] * static_cast<double>(want[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Net {
  Tensor w1 = parameter({16, 3, 3, 3}, 1, 0.3f), g1 = parameter({16}, 2, 1.0f), b1 = parameter({16}, 3, 0.1f);
  Tensor w2 = parameter({10, 16}, 4, 0.3f), bias2 = parameter({10}, 5, 0.1f);
  Tensor rm = Tensor::zeros({16}), rv = Tensor::zeros({16});
  // conv -> batchnorm -> relu -> average pool -> linear -> cross entropy
  Tensor loss(const Tensor& x, const Tensor& labels) {
    Tensor h = ops::conv2d(x, w1, Tensor(), ops::Conv2dOptions{1, 1, 1, 1});
    h = ops::relu(ops::batchnorm2d(h, g1, b1, rm, rv, true));
    h = ops::flatten(ops::adaptive_avgpool2d(h, 1, 1));
    return ops::cross_entropy(ops::linear(h, w2, bias2), labels);
  }
  std::vector<Tensor*> params() { return {&w1, &g1, &b1, &w2, &bias2}; }
};

}  // namespace

TEST(Autocast, ConvAndLinearComputeInBf16AndSaveBf16WithF32Gradients) {
  Fp32Policy policy;
  PolicyScope scope(policy);
  Tensor x = random_tensor({4, 8, 6, 6}, 11).set_requires_grad();
  Tensor w = parameter({12, 8, 3, 3}, 12, 0.2f);
  Tensor y;
  {
    AutocastScope bf16(DType::bf16);
    y = ops::conv2d(x, w, Tensor(), ops::Conv2dOptions{1, 1, 1, 1});
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  int64_t bf16_bytes = 0;
  for (const SavedRecord& r : policy.describe())
    if (r.op == "conv2d" && r.dtype == DType::bf16) bf16_bytes += r.bytes;
  EXPECT_EQ(bf16_bytes, x.numel() * 2) << "the conv's input is saved as bf16, half its f32 bytes";
  backward(y, ones(y.shape()));  // an f32 seed: gradients are f32 under autocast
  ASSERT_EQ(x.grad().dtype(), DType::f32);
  ASSERT_EQ(w.grad().dtype(), DType::f32);

  // Against f32 on the bf16-rounded operands: bf16's 8-bit mantissa in the output gradient.
  Tensor xr = bf16_rounded(x).set_requires_grad(), wr = bf16_rounded(w).set_requires_grad();
  const Tensor yr = ops::conv2d(xr, wr, Tensor(), ops::Conv2dOptions{1, 1, 1, 1});
  EXPECT_LT(relative_error(y.to_vector(), yr.to_vector()), 1e-2);
  backward(yr, ones(yr.shape()));
  EXPECT_LT(relative_error(x.grad().to_vector(), xr.grad().to_vector()), 1e-2);
  EXPECT_LT(relative_error(w.grad().to_vector(), wr.grad().to_vector()), 1e-2);
}

TEST(Autocast, ActivationsFlowInBf16AndTheLossStaysF32) {
  Net net;
  const Tensor x = random_tensor({8, 3, 8, 8}, 21);
  Tensor labels = Tensor::zeros({8}, DType::i64);
  for (int64_t i = 0; i < 8; ++i) labels.data<int64_t>()[i] = i;
  Fp32Policy policy;
  PolicyScope scope(policy);
  Tensor loss16;
  {
    AutocastScope bf16(DType::bf16);
    loss16 = net.loss(x, labels);
  }
  EXPECT_EQ(loss16.dtype(), DType::f32);
  // Every activation saved (conv input, batchnorm input, relu output, linear input) is bf16; only the
  // batchnorm statistics, the loss's probabilities and the parameters are f32.
  for (const SavedRecord& r : policy.describe()) {
    if (!r.statistics && r.op != "cross_entropy" && r.need == Need::Value && r.numel > 16) {
      EXPECT_EQ(r.dtype, DType::bf16) << r.op << " " << r.layer;
    }
  }
  backward(loss16);
  std::vector<std::vector<float>> g16;
  for (Tensor* p : net.params()) {
    ASSERT_TRUE(p->grad().defined()) << "parameter " << g16.size() << " has no gradient";
    ASSERT_EQ(p->grad().dtype(), DType::f32);
    g16.push_back(p->grad().to_vector());
    p->zero_grad();
  }
  const Tensor loss32 = net.loss(x, labels);
  backward(loss32);
  EXPECT_NEAR(loss16.item(), loss32.item(), 0.02 * loss32.item());
  for (size_t i = 0; i < g16.size(); ++i)
    EXPECT_LT(relative_error(g16[i], net.params()[i]->grad().to_vector()), 0.05) << "parameter " << i;
}

TEST(Autocast, CompressingStoresEncodeBf16InputsAsTheirF32Values) {
  const Tensor x16 = random_tensor({4, 8, 16, 16}, 31).to(DType::bf16);
  const Tensor x32 = x16.to(DType::f32);
  for (const std::string scheme : {"actnn", "mixed", "gact", "fp8"}) {
    std::vector<std::vector<float>> loaded;
    for (const Tensor& x : {x16, x32}) {
      StorePolicySpec spec;
      const std::map<std::string, std::map<std::string, std::string>> options{{"actnn", {{"bits", "2"}}},
                                                                              {"mixed", {{"preset", "2/4@0.5"}}},
                                                                              {"gact", {{"initial_bits", "2"}}},
                                                                              {"fp8", {}}};
      spec.default_scheme = {scheme, options.at(scheme), "test"};
      spec.seed = 7;
      RulePolicy policy(spec);
      PolicyScope scope(policy);
      const SaveRequest r{Need::Value, nullptr, "conv2d", "layer"};
      SavedTensorStore& store = policy.store_for(r);
      const SavedHandle h = store.save(x, r);
      loaded.push_back(store.load(h).to(DType::f32).to_vector());
      store.release(h);
    }
    EXPECT_EQ(loaded[0], loaded[1]) << scheme;
    EXPECT_NE(loaded[0], x32.to_vector()) << scheme << ": compressed, not kept exact";
  }
}

// A Value loaded in a 16-bit kernel's dtype (a convolution's input for its weight gradient under
// autocast: Node::load(i, dtype)) holds load(h)'s values rounded to that dtype, in the saved
// layout, for every store; the per-group store dequantizes straight into bf16 on the CPU, groups
// longer than its kernels read as bf16 included (those are quantized from an f32 copy).
TEST(Autocast, AValueLoadedInBf16IsTheLoadedValuesRounded) {
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> schemes{
      {"fp32", {}},
      {"actnn", {{"bits", "2"}}},
      {"actnn", {{"bits", "4"}, {"grouping", "per_plane"}, {"group_size", "32"}}},
      {"actnn", {{"bits", "2"}, {"grouping", "flat"}, {"group_size", "40000"}}},
      {"gact", {{"initial_bits", "2"}}},
      {"mixed", {{"preset", "2/4@0.5"}}},
      {"mixed", {{"base_bits", "2"}, {"mix_bits", "2"}, {"mix_prob", "0"}, {"bucket_size", "512"}, {"scale", "maxabs"}}},
      {"fp8", {}}};
  for (const Layout layout : {Layout::Plain, cpu::native_blocked_layout()})
    for (const auto& [scheme, options] : schemes) {
      const Tensor x16 = random_tensor({4, 32, 14, 14}, 41).to_layout(layout).to(DType::bf16);
      StorePolicySpec spec;
      spec.default_scheme = {scheme, options, "test"};
      spec.seed = 7;
      RulePolicy policy(spec);
      PolicyScope scope(policy);
      const SaveRequest r{Need::Value, nullptr, "conv2d", "layer"};
      SavedTensorStore& store = policy.store_for(r);
      const SavedHandle h = store.save(x16, r);
      const Tensor want = store.load(h).to(DType::bf16), got = store.load_in(h, DType::bf16);
      const std::string what = scheme + " " + std::to_string(options.size()) + " options, " + x16.describe();
      ASSERT_EQ(got.dtype(), DType::bf16) << what;
      ASSERT_EQ(got.layout(), layout) << what;
      ASSERT_EQ(got.shape(), x16.shape()) << what;
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << what;
      if (scheme != "fp32") {
        EXPECT_NE(std::memcmp(got.raw(), x16.raw(), x16.nbytes()), 0) << what << ": compressed";
      }
      store.release(h);
    }
}

// A bf16 convolution whose weight gradient the backend forms with f32 kernels on the bf16 values
// (the CPU's strided ones: oneDNN 2.6's bf16 kernel for them stalls on a shared machine) loads its
// input in f32 for it and reads the f32 output gradient as it is, not 16-bit copies converted back:
// its weight gradient's backward peaks no higher than the same convolution's in f32 (ResNet-50's
// strided 1x1 held 16 MiB more at the backward's peak at batch 64, and fitted fewer samples in bf16
// than in f32 with 4-bit storage), and is the f32 convolution's on the same values, bit for bit.
// x wants no gradient: the input gradient's bf16 kernel may work on copies of its own (AMX's
// channels-last ones), which are not what this asserts.
TEST(Autocast, AStridedConvolutionsF32WeightGradientReadsItsInputAndGradientInF32) {
  if (!backend(Device::cpu()).conv_computes_in(DType::bf16))
    GTEST_SKIP() << "this CPU has no bf16 convolutions: they compute in f32 at the kernels' edges";
  const Tensor seed = random_tensor({8, 128, 16, 16}, 53);
  std::vector<float> dw[2];
  int64_t peak[2] = {0, 0};
  const DType dtypes[2] = {DType::f32, DType::bf16};
  for (int k = 0; k < 2; ++k) {
    StorePolicySpec spec;
    spec.default_scheme = {"actnn", {{"bits", "4"}}, "test"};
    spec.seed = 7;
    RulePolicy policy(spec);
    PolicyScope scope(policy);
    // The same codes in both dtypes.
    const Tensor x = bf16_rounded(random_tensor({8, 64, 32, 32}, 51).to_layout(cpu::native_blocked_layout()));
    Tensor w = parameter({128, 64, 1, 1}, 52, 0.2f);
    Tensor y;
    {
      AutocastScope autocast(dtypes[k]);
      y = ops::conv2d(x, w, Tensor(), ops::Conv2dOptions{2, 2, 0, 0});
    }
    ASSERT_EQ(y.dtype(), dtypes[k]);
    Allocator& a = Allocator::cpu();
    a.reset_peak();
    const int64_t before = a.total_current();
    backward(y, seed.to_layout(y.layout()));
    peak[k] = a.total_peak() - before;
    dw[k] = w.grad().to_vector();
  }
  EXPECT_LE(peak[1], peak[0] + (64 << 10)) << "bf16's backward peak " << peak[1] << " bytes, f32's " << peak[0];
  EXPECT_GT(peak[0], 0);
  EXPECT_EQ(dw[1], dw[0]);
}

// A batchnorm whose kernels read bf16 as it lies (the CPU's) gets its compressed bf16 input back
// in bf16 for its backward: the per-group store decodes straight into it, and the backward's
// Workspace holds half the bytes of an f32 copy; the gradients are those of the f32-decoded values
// rounded to bf16, which is what the kernels would read of them.
TEST(Autocast, ABatchnormsCompressedBf16InputIsDecodedInBf16ForItsBackward) {
  if (!backend(Device::cpu()).batchnorm_reads(DType::bf16)) GTEST_SKIP() << "this backend's batchnorm reads f32";
  StorePolicySpec spec;
  spec.default_scheme = {"actnn", {{"bits", "2"}}, "test"};
  spec.seed = 7;
  RulePolicy policy(spec);
  PolicyScope scope(policy);
  const Tensor x16 = random_tensor({8, 32, 16, 16}, 61).to(DType::bf16).to_layout(cpu::native_blocked_layout());
  Tensor x = x16.clone().set_requires_grad();
  Tensor gamma = parameter({32}, 62, 1.0f), beta = parameter({32}, 63, 0.1f);
  Tensor running_mean = Tensor::zeros({32}), running_var = Tensor::full({32}, 1.0f);
  const Tensor y = ops::batchnorm2d(x, gamma, beta, running_mean, running_var, true);
  ASSERT_EQ(y.dtype(), DType::bf16);
  Allocator& a = Allocator::cpu();
  const Tensor seed = random_tensor(y.shape(), 64).to_layout(y.layout());
  const int64_t before = a.current(MemTag::Workspace);
  a.reset_peak();
  backward(y, seed);
  const int64_t f32_bytes = x16.numel() * 4;
  EXPECT_LE(a.peak(MemTag::Workspace) - before, f32_bytes / 2 + (16 << 10)) << "the decoded input in bf16, not f32";
  EXPECT_TRUE(x.grad().defined());
}

TEST(Autocast, ACheckpointSegmentRecomputesUnderTheForwardsAutocast) {
  Tensor w = parameter({6, 6}, 41, 0.5f);
  auto run = [&](bool recompute) {
    Tensor x = random_tensor({5, 6}, 42).set_requires_grad();
    auto segment = [&](const Tensor& in) { return ops::gelu(ops::linear(in, w, Tensor())); };
    Tensor y;
    {
      AutocastScope bf16(DType::bf16);
      y = recompute ? checkpoint(segment, x) : segment(x);
    }
    EXPECT_EQ(y.dtype(), DType::bf16);
    backward(y,
             ones(y.shape()));  // an f32 seed: gradients are f32 under autocast
                                // // outside the scope, as a trainer runs it
    std::vector<float> g = w.grad().to_vector();
    w.zero_grad();
    return g;
  };
  EXPECT_EQ(run(true), run(false)) << "the recompute ran in another precision than the forward";
}

// A segment's bf16 input kept by a compressing store comes back to the recompute in bf16, as the
// forward ran on it (and as the FP32 store gives it back), so that its ops run in the forward's
// dtypes: a residual sum stays bf16.
TEST(Autocast, ACompressedSegmentInputIsRecomputedInItsForwardDtype) {
  Tensor w = parameter({6, 6}, 43, 0.5f);
  for (const std::string scheme : {"fp32", "actnn"}) {
    StorePolicySpec spec;
    spec.default_scheme = {scheme, {}, "test"};
    RulePolicy policy(spec);
    PolicyScope scope(policy);
    std::vector<DType> seen;  // the segment input's dtype, in the forward then in the recompute
    auto segment = [&](const Tensor& in) {
      seen.push_back(in.dtype());
      return ops::add(in, ops::linear(ops::gelu(in), w, Tensor()));
    };
    Tensor x = random_tensor({5, 6}, 44).set_requires_grad();
    Tensor y;
    {
      AutocastScope bf16(DType::bf16);
      y = checkpoint(segment, ops::linear(x, w, Tensor()));  // a bf16 input
    }
    EXPECT_EQ(y.dtype(), DType::bf16) << scheme;
    backward(y, ones(y.shape()));
    EXPECT_EQ(seen, (std::vector<DType>{DType::bf16, DType::bf16})) << scheme;
    EXPECT_TRUE(std::isfinite(w.grad().to_vector()[0])) << scheme;
    w.zero_grad();
  }
}

// ... and f(x) comes back in bf16, the f32 f(x) rounded (the CPU computes it from the bf16 tile in
// the pass that indexes it); a relu's 1-bit step mask under a compressing store likewise.
TEST(Autocast, FewbitTablesIndexBf16InputsAsTheirF32Values) {
  for (const Tensor& x16 : {random_tensor({4, 64}, 51, -3.0f, 3.0f).to(DType::bf16),
                            random_tensor({4, 32, 14, 14}, 52, -3.0f, 3.0f).to_layout(cpu::native_blocked_layout()).to(DType::bf16)})
    for (const auto& [fn, scheme] : {std::pair<std::string, std::string>{"gelu", "fewbit"}, {"relu", "actnn"}}) {
      std::vector<std::vector<float>> grads, ys;
      for (const Tensor& x0 : {x16, x16.to(DType::f32)}) {
        StorePolicySpec spec;
        spec.rules.push_back({{fn}, {}, {scheme, {{"bits", "3"}}, "test"}});
        RulePolicy policy(spec);
        PolicyScope scope(policy);
        Tensor x = x0.detached().set_requires_grad();
        Tensor y = fn == "gelu" ? ops::gelu(x) : ops::relu(x);
        EXPECT_EQ(y.dtype(), x0.dtype());
        for (const SavedRecord& r : policy.describe()) EXPECT_EQ(r.scheme, scheme);
        ys.push_back(y.to(DType::bf16).to(DType::f32).to_vector());  // the f32 run's rounded as Tensor::to rounds
        backward(y, ones(y.shape()));
        grads.push_back(x.grad().to_vector());
      }
      EXPECT_EQ(grads[0], grads[1]) << fn << " " << x16.describe() << ": the derivative codes of the same values";
      EXPECT_EQ(ys[0], ys[1]) << fn << " " << x16.describe() << ": f(x) in bf16";
    }
}

// tests/golden/make_autocast_golden.py: the same step under PyTorch 1.13's CPU bf16 autocast.
TEST(Autocast, AStepMatchesPyTorchsBf16AutocastStep) {
  const SafetensorsFile f = read_safetensors(packrat::testing::golden_path("autocast_bf16_golden.safetensors"));
  auto golden = [&](const std::string& name) {
    const Tensor* t = f.find(name);
    if (!t) throw std::runtime_error("golden tensor missing: " + name);
    return *t;
  };
  auto param = [&](const std::string& name) {
    TagScope tag(MemTag::Parameter);
    return golden("param." + name).clone().set_requires_grad();
  };
  Tensor w = param("conv.weight"), gamma = param("bn.weight"), beta = param("bn.bias"), fw = param("fc.weight"),
         fb = param("fc.bias");
  Tensor rm = Tensor::zeros({16}), rv = Tensor::zeros({16});
  Fp32Policy policy;
  PolicyScope scope(policy);
  Tensor logits, loss;
  {
    AutocastScope bf16(DType::bf16);
    Tensor h = ops::conv2d(golden("x"), w, Tensor(), ops::Conv2dOptions{1, 1, 1, 1});
    h = ops::relu(ops::batchnorm2d(h, gamma, beta, rm, rv, true));
    logits = ops::linear(ops::flatten(ops::adaptive_avgpool2d(h, 1, 1)), fw, fb);
    loss = ops::cross_entropy(logits, golden("labels"));
  }
  EXPECT_EQ(logits.dtype(), DType::bf16);
  EXPECT_LT(relative_error(logits.to_vector(), golden("logits").to_vector()), 2e-2);
  EXPECT_NEAR(loss.item(), golden("loss").item(), 1e-2 * golden("loss").item());
  backward(loss);
  const std::vector<std::pair<std::string, Tensor*>> grads{
      {"conv.weight", &w}, {"bn.weight", &gamma}, {"bn.bias", &beta}, {"fc.weight", &fw}, {"fc.bias", &fb}};
  for (const auto& [name, p] : grads)
    EXPECT_LT(relative_error(p->grad().to_vector(), golden("grad." + name).to_vector()), 3e-2) << name;
}

// Attention under bf16 autocast: q, k, v, the probabilities (standard) or the output
// (memory-efficient) saved in bf16, the row log-sum-exp in f32; both algorithms agree.
TEST(Autocast, AttentionSavesBf16AndBothAlgorithmsAgree) {
  std::vector<std::vector<float>> dq;
  for (const bool memory_efficient : {false, true}) {
    Fp32Policy policy;
    PolicyScope scope(policy);
    Tensor q = random_tensor({2, 3, 16, 8}, 61).set_requires_grad(), k = random_tensor({2, 3, 16, 8}, 62),
           v = random_tensor({2, 3, 16, 8}, 63);
    ops::AttentionOptions o;
    o.causal = true;
    o.memory_efficient = memory_efficient;
    Tensor y;
    {
      AutocastScope bf16(DType::bf16);
      y = ops::scaled_dot_product_attention(q, k, v, o);
    }
    EXPECT_EQ(y.dtype(), DType::bf16);
    for (const SavedRecord& r : policy.describe())
      EXPECT_EQ(r.dtype, r.op == "attention_lse" ? DType::f32 : DType::bf16)
          << r.op << " memory_efficient " << memory_efficient;
    backward(y, ones(y.shape()));
    EXPECT_EQ(q.grad().dtype(), DType::f32);
    dq.push_back(q.grad().to_vector());
  }
  EXPECT_LT(relative_error(dq[1], dq[0]), 2e-2);
}

// The CPU's pointwise kernels take bf16 where it computes in bf16: the same values as on the
// tensor widened to f32, chunk boundaries included.
TEST(Autocast, TheCpusPointwiseKernelsReadBf16AsItsF32Values) {
  Backend& cpu = backend(Device::cpu());
  if (!cpu.computes_in(DType::bf16)) GTEST_SKIP() << "this CPU has no bf16 kernels (its ops convert at the edges)";
  const Tensor x16 = random_tensor({3, 1111}, 71, -4.0f, 4.0f).to(DType::bf16), x32 = x16.to(DType::f32);
  const Tensor g = random_tensor({3, 1111}, 72);
  for (const char* name : {"gelu", "silu", "relu", "sigmoid", "tanh"}) {
    const ActivationId id = pointwise_by_name(name).id;
    const Tensor y = cpu.pointwise_forward(id, x16);
    EXPECT_EQ(y.dtype(), DType::bf16) << name;
    EXPECT_EQ(y.to_vector(), cpu.pointwise_forward(id, x32).to(DType::bf16).to_vector()) << name;
    EXPECT_EQ(cpu.pointwise_derivative(id, x16, false).to_vector(), cpu.pointwise_derivative(id, x32, false).to_vector())
        << name;
    EXPECT_EQ(cpu.pointwise_backward(id, x16, g, false).to_vector(), cpu.pointwise_backward(id, x32, g, false).to_vector())
        << name;
  }
}

// The CPU's pooling reads bf16 as it lies where oneDNN has bf16 kernels (a bf16 x was converted to an
// f32 copy first: squeeze-and-excitation's global average pools, one whole activation each, were
// half of EfficientNet-B0's bf16 -> f32 conversions): y in bf16 is the f32 pooling's y rounded, and
// max pooling's argmax the same, for oneDNN's blocked and plain kernels and packrat's plain loop.
TEST(Autocast, TheCpusPoolingReadsBf16AsItsF32Values) {
  Backend& cpu = backend(Device::cpu());
  if (!cpu.pool_reads(DType::bf16)) GTEST_SKIP() << "this CPU has no bf16 kernels (its pooling reads an f32 copy)";
  struct Case {
    PoolGeometry g;
    PoolKind kind;
  };
  const std::vector<Case> cases{
      {{4, 32, 9, 9, 1, 1, 9, 9, 9, 9, 0, 0}, PoolKind::AvgExcludePadding},  // global: SE's squeeze
      {{4, 32, 8, 8, 4, 4, 3, 3, 2, 2, 1, 1}, PoolKind::Max},                // a ResNet stem's
      {{4, 32, 8, 8, 8, 8, 3, 3, 1, 1, 1, 1}, PoolKind::AvgIncludePadding}};
  for (const Layout layout : {Layout::Plain, cpu::native_blocked_layout()})
    for (const Case& c : cases) {
      const PoolGeometry& g = c.g;
      const Tensor x16 = random_tensor({g.N, g.C, g.H, g.W}, 81, -4.0f, 4.0f).to_layout(layout).to(DType::bf16);
      const Tensor x32 = x16.to(DType::f32);
      const bool max = c.kind == PoolKind::Max;
      Tensor idx16, idx32;
      const Tensor y16 = cpu.pool_forward(x16, g, c.kind, max ? &idx16 : nullptr);
      const Tensor y32 = cpu.pool_forward(x32, g, c.kind, max ? &idx32 : nullptr);
      const std::string what = std::string(layout_name(layout)) + " " + std::to_string(static_cast<int>(c.kind));
      EXPECT_EQ(y16.dtype(), DType::bf16) << what;
      EXPECT_EQ(y16.layout(), layout) << what;
      EXPECT_EQ(y16.to(DType::f32).to_vector(), y32.to(DType::bf16).to(DType::f32).to_vector()) << what;
      if (max) {
        ASSERT_EQ(idx16.nbytes(), idx32.nbytes()) << what;
        EXPECT_EQ(std::memcmp(idx16.raw(), idx32.raw(), idx16.nbytes()), 0) << what << ": argmax";
      }
    }
}

// The CPU adds and multiplies two bf16 operands as they lie: the result is the f32 result of their
// f32 values rounded to bf16, for same-shaped operands (a residual addition, whose two f32 copies
// and f32 sum were ResNet-50's forward peak under bf16 at a large batch), a blocked tensor by a
// per-channel one (squeeze-and-excitation's scale) and numpy broadcasting; and it holds no f32 copy.
TEST(Autocast, TheCpusAdditionsAndProductsReadTwoBf16OperandsAsTheirF32Values) {
  Backend& cpu = backend(Device::cpu());
  ASSERT_TRUE(cpu.binary_reads(DType::bf16));
  const Layout blocked = cpu::native_blocked_layout();
  const std::vector<std::pair<Tensor, Tensor>> pairs{
      {random_tensor({4, 32, 7, 7}, 91), random_tensor({4, 32, 7, 7}, 92)},
      {random_tensor({4, 32, 7, 7}, 93).to_layout(blocked), random_tensor({4, 32, 7, 7}, 94).to_layout(blocked)},
      {random_tensor({4, 32, 7, 7}, 95).to_layout(blocked), random_tensor({4, 32, 1, 1}, 96)},
      {random_tensor({4, 5, 6}, 97), random_tensor({1, 5, 1}, 98)}};
  for (const auto& [a32, b32] : pairs)
    for (const bool add : {true, false}) {
      const Tensor a = a32.to(DType::bf16), b = b32.to(DType::bf16);
      const std::string what = a.describe() + (add ? " + " : " * ") + b.describe();
      Allocator& alloc = Allocator::cpu();
      alloc.reset_peak();
      const int64_t before = alloc.total_current();
      const Tensor y = add ? ops::add(a, b) : ops::mul(a, b);
      EXPECT_EQ(alloc.total_peak() - before, static_cast<int64_t>(y.nbytes())) << what << ": y alone, no f32 copy";
      const Tensor want = (add ? ops::add(a.to(DType::f32), b.to(DType::f32)) : ops::mul(a.to(DType::f32), b.to(DType::f32)));
      ASSERT_EQ(y.dtype(), DType::bf16) << what;
      EXPECT_EQ(y.layout(), want.layout()) << what;
      EXPECT_EQ(y.to(DType::f32).to_vector(), want.to(DType::bf16).to(DType::f32).to_vector()) << what;
    }
}

// The backend's subtractions and divisions of a blocked bf16 tensor and a per-channel one, in
// either order (the per-channel loop swaps its operands for the second), and of two equal-layout
// ones over a length no multiple of a SIMD vector: the plain f32 loop's results rounded, bit for bit.
TEST(Autocast, TheCpusBf16BinaryOpsKeepTheirOperandsOrder) {
  Backend& cpu = backend(Device::cpu());
  const Layout blocked = cpu::native_blocked_layout();
  const Tensor x = random_tensor({3, 32, 5, 5}, 81).to_layout(blocked), v = random_tensor({3, 32, 1, 1}, 82, 0.5f, 2.0f);
  const Tensor p = random_tensor({3, 7, 11}, 83), q = random_tensor({3, 7, 11}, 84, 0.5f, 2.0f);
  const std::vector<std::pair<Tensor, Tensor>> pairs{{x, v}, {v, x}, {p, q}};
  for (const auto& [a32, b32] : pairs)
    for (const BinaryOp op : {BinaryOp::Sub, BinaryOp::Div}) {
      const Tensor a = a32.to(DType::bf16), b = b32.to(DType::bf16);
      const std::string what = a.describe() + (op == BinaryOp::Sub ? " - " : " / ") + b.describe();
      const Tensor y = cpu.binary(op, a, b);
      const Tensor want = cpu.binary(op, a.to(DType::f32).to_plain(), b.to(DType::f32).to_plain());  // the plain loop's
      ASSERT_EQ(y.dtype(), DType::bf16) << what;
      EXPECT_EQ(y.to_plain().to(DType::f32).to_vector(), want.to_plain().to(DType::bf16).to(DType::f32).to_vector()) << what;
    }
}

// A device without bf16 kernels (the emulated GPU) computes a bf16 step's convolutions and matmuls at
// the kernels' edges, on bf16 values, which TF32 reads exactly: each of those kernels, forward and
// backward, runs with TF32 allowed (a GPU's cuDNN / cuBLAS take its tensor cores), where the run's
// setting allows none; the same step in f32 runs every one without. The allowance is the thread's.
TEST(Autocast, KernelsAtTheEdgesMayRunOnTf32WhichHoldsTheirOperandsExactly) {
  packrat::testing::EmulatedGpu gpu;
  const Device d = packrat::testing::EmulatedGpu::device();
  DeviceScope on(d);
  const Tf32Use before = tf32_use();
  set_tf32_use(Tf32Use{});
  Fp32Policy policy;
  PolicyScope scope(policy);
  auto on_gpu = [&](const Shape& s, uint64_t seed) {
    return random_tensor(s, seed, -0.5f, 0.5f).to(d).set_requires_grad();
  };
  const Tensor x = on_gpu({2, 3, 6, 6}, 21), w = on_gpu({4, 3, 3, 3}, 22), lw = on_gpu({5, 144}, 23),
               m = on_gpu({5, 3}, 24);
  auto step = [&](DType precision) {
    AutocastScope cast(precision);
    const Tensor h = ops::conv2d(x, w, Tensor(), ops::Conv2dOptions{1, 1, 1, 1});  // (2, 4, 6, 6)
    const Tensor y = ops::matmul(ops::linear(ops::flatten(h), lw, Tensor()), m);    // (2, 5) @ (5, 3)
    backward(y, ones(y.shape()).to(d));
  };
  step(DType::bf16);
  EXPECT_FALSE(tf32_use().convolutions || tf32_use().matmuls) << "the allowance ends with the op";
  // conv: forward, data and weight gradients; linear and matmul: forward and both gradients each.
  EXPECT_EQ(gpu.convolutions().with_tf32, 3);
  EXPECT_EQ(gpu.convolutions().without, 0);
  EXPECT_EQ(gpu.matmuls().with_tf32, 6);
  EXPECT_EQ(gpu.matmuls().without, 0);
  step(DType::f32);
  EXPECT_EQ(gpu.convolutions().without, 3);
  EXPECT_EQ(gpu.matmuls().without, 6);
  EXPECT_EQ(gpu.matmuls().with_tf32, 6);
  {
    const Tf32ForHalfOperands tf32(true);
    EXPECT_TRUE(tf32_use().convolutions && tf32_use().matmuls);
    bool other_thread = true;
    std::thread([&] { other_thread = tf32_use().convolutions || tf32_use().matmuls; }).join();
    EXPECT_FALSE(other_thread) << "another thread's kernels keep the run's setting";
  }
  set_tf32_use(before);
}
