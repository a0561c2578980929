// An activation's backward straight from mixed / deterministic bucket codes (dequantize_mixed_apply,
// DequantizeBucketQuadsBody with the sink of quant/codec/apply_derivative_sink.h): the same floats as
// dequantizing and then the backend's pointwise_backward, for activations whose derivative comes
// from the input and from the output, over every configuration of mixed_cases() (mixed widths by
// bucket and by tensor, sign-magnitude scales, codes over 8 bits, short last buckets); the mixed
// store on a device takes that path, with no Workspace tensor of the dequantized values, in both
// storage modes. On a GPU: the CUDA kernel against the two CUDA passes.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/philox.h"
#include "quant/mixed/mixed_quant.h"
#include "quant/mixed/mixed_store.h"
#include "tests/support/emulated_gpu.h"
#include "tests/support/fused_derivative.h"
#include "tests/support/gpu.h"
#include "tests/support/mixed_cases.h"

namespace packrat {
namespace {

const QuantNoise kNoise{0xB0C4E7ull, quant_stream(7, 3)};
constexpr int64_t kSizes[] = {1, 3037};  // a single element, and buckets with a short tail

struct Activation {
  ActivationId id;
  bool from_output;  // the codes hold y = f(x)
};
constexpr Activation kActivations[] = {
    {ActivationId::gelu, false}, {ActivationId::silu, false}, {ActivationId::sigmoid, true}, {ActivationId::tanh, true}};

std::vector<float> values(int64_t n, uint64_t seed) {
  PhiloxStream s(seed, 11);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = -4.0f + 8.0f * s.uniform();
  return v;
}

bool same_floats(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(Device::cpu()).to_vector(), y = b.to(Device::cpu()).to_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// For each case, size and activation on device d: gx from the codes in one pass, and in two.
template <class Check>
void for_each_case_on(Device d, const Check& check) {
  for (const testing::MixedCase& k : testing::mixed_cases())
    for (int64_t n : kSizes) {
      const Tensor x = Tensor::from_vector(Shape{n}, values(n, static_cast<uint64_t>(n + 17 * k.c.bucket_size))).to(d);
      const Tensor grad = Tensor::from_vector(Shape{n}, values(n, 99)).to(d);
      const MixedPacked p = quantize_mixed(x, k.c, kNoise);
      const Tensor dequantized = Tensor::empty(x.shape(), DType::f32, Layout::Plain, MemTag::Workspace, d);
      dequantize_mixed(p, dequantized);
      for (const Activation& a : kActivations) {
        const Tensor two_passes = backend_of(grad).pointwise_backward(a.id, dequantized, grad, a.from_output);
        const Tensor one_pass = Tensor::empty_like(grad);
        dequantize_mixed_apply(p, a.id, a.from_output, grad, one_pass);
        check(k.name + " numel " + std::to_string(n) + " activation " + std::to_string(static_cast<int>(a.id)),
              one_pass, two_passes);
      }
    }
}

TEST(MixedApplyDerivative, OnePassGivesTheFloatsOfDequantizingThenTheBackward) {
  for_each_case_on(Device::cpu(), [](const std::string& what, const Tensor& one, const Tensor& two) {
    ASSERT_TRUE(same_floats(one, two)) << what;
  });
}

TEST(MixedApplyDerivative, RefusesAMismatchedGradient) {
  const Tensor x = Tensor::from_vector(Shape{600}, values(600, 3));
  const MixedPacked p = quantize_mixed(x, MixedQuantConfig{}, kNoise);
  const Tensor grad = Tensor::empty(Shape{599}), gx = Tensor::empty(Shape{599});
  try {
    dequantize_mixed_apply(p, ActivationId::gelu, false, grad, gx);
    FAIL() << "a gradient of 599 elements for codes of 600 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dequantize_mixed_apply: 600 elements held"), std::string::npos) << e.what();
  }
}

// The store on a device (the emulated GPU: the same code path as a GPU, the CPU's kernels):
// apply_derivative gives the CPU store's floats, and makes no Workspace tensor of the values, in
// both storage modes and for the deterministic scheme.
TEST(MixedApplyDerivative, TheStoreOnADeviceAppliesTheDerivativeWithoutAWorkspaceCopy) {
  testing::EmulatedGpu emulated;
  const Tensor x = Tensor::from_vector(Shape{4, 8, 16, 16}, values(4 * 8 * 16 * 16, 9));
  const Tensor grad = Tensor::from_vector(x.shape(), values(x.numel(), 10));
  MixedStoreOptions deterministic;
  deterministic.scheme = "deterministic";
  deterministic.quant.base = deterministic.quant.mix = affine_width(3);
  deterministic.quant.rounding = Rounding::Nearest;
  deterministic.schedule = MixSchedule{ScheduleKind::Constant, 0.0, 0.0};
  MixedStoreOptions on_backward;
  on_backward.mode = StorageMode::QuantizeOnBackward;
  for (const MixedStoreOptions& o : {MixedStoreOptions{}, on_backward, deterministic})
    testing::expect_derivative_applied_without_workspace_copy([&] { return std::make_unique<MixedStore>(o); }, x,
                                                              grad, o.scheme + " " + std::string(storage_mode_name(o.mode)));
}

TEST(MixedApplyDerivativeDevice, CudaKernelGivesTheFloatsOfTheTwoCudaPasses) {
  PACKRAT_SKIP_WITHOUT_GPU();
  for_each_case_on(Device::cuda(0), [](const std::string& what, const Tensor& one, const Tensor& two) {
    EXPECT_EQ(one.device(), Device::cuda(0));
    ASSERT_TRUE(same_floats(one, two)) << what;
  });
}

}  // namespace
}  // namespace packrat
