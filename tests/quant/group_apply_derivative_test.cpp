// An activation's backward straight from its per-group codes (dequantize_groups_apply, the sink of
// quant/codec/apply_derivative_sink.h): the same floats as dequantizing and then the backend's
// pointwise_backward, for activations whose derivative comes from the input and from the output,
// over every geometry of group_cases(); the per-group store on a device takes that path, with no
// Workspace tensor of the dequantized values. On a GPU: the CUDA kernel against the two CUDA passes.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/philox.h"
#include "quant/group/group_quant.h"
#include "quant/group/group_store.h"
#include "tests/support/emulated_gpu.h"
#include "tests/support/fused_derivative.h"
#include "tests/support/gpu.h"
#include "tests/support/group_cases.h"

namespace packrat {
namespace {

const QuantNoise kNoise{0xA11CEull, quant_stream(5, 1)};

struct Activation {
  ActivationId id;
  bool from_output;  // the codes hold y = f(x)
};
constexpr Activation kActivations[] = {
    {ActivationId::gelu, false}, {ActivationId::silu, false}, {ActivationId::sigmoid, true}, {ActivationId::tanh, true}};

bool same_floats(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(Device::cpu()).to_vector(), y = b.to(Device::cpu()).to_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// For each case and activation on device d: gx from the codes in one pass, and in two.
template <class Check>
void for_each_case_on(Device d, const Check& check) {
  for (const testing::GroupCase& k : testing::group_cases()) {
    const int64_t n = k.samples * k.span;
    const Tensor x = Tensor::from_vector(Shape{k.samples, k.span},
                                         testing::group_values(n, static_cast<uint64_t>(3 * k.c.bits + k.c.group_size)))
                         .to(d);
    const Tensor grad = Tensor::from_vector(Shape{k.samples, k.span}, testing::group_values(n, 77)).to(d);
    const GroupGeometry g = group_geometry(n, k.samples, k.c, k.plane);
    const Tensor codes = Tensor::empty(Shape{g.code_bytes()}, DType::u8, Layout::Plain, MemTag::Saved, d);
    const Tensor meta = Tensor::empty(Shape{g.meta_bytes()}, DType::u8, Layout::Plain, MemTag::Saved, d);
    quantize_groups(x, g, k.c.rounding, kNoise, codes, meta);
    const Tensor values = Tensor::empty(x.shape(), DType::f32, Layout::Plain, MemTag::Workspace, d);
    dequantize_groups(codes, meta, g, values);
    for (const Activation& a : kActivations) {
      const Tensor two_passes = backend_of(grad).pointwise_backward(a.id, values, grad, a.from_output);
      const Tensor one_pass = Tensor::empty_like(grad);
      dequantize_groups_apply(codes, meta, g, a.id, a.from_output, grad, one_pass);
      check(k, a, one_pass, two_passes);
    }
  }
}

TEST(GroupApplyDerivative, OnePassGivesTheFloatsOfDequantizingThenTheBackward) {
  for_each_case_on(Device::cpu(), [](const testing::GroupCase& k, const Activation& a, const Tensor& one,
                                     const Tensor& two) {
    ASSERT_TRUE(same_floats(one, two)) << k.name() << " activation " << static_cast<int>(a.id);
  });
}

TEST(GroupApplyDerivative, RefusesAMismatchedGradient) {
  const GroupQuantConfig c;
  const GroupGeometry g = group_geometry(512, 2, c, 0);
  const Tensor codes = Tensor::empty(Shape{g.code_bytes()}, DType::u8), meta = Tensor::empty(Shape{g.meta_bytes()}, DType::u8);
  const Tensor grad = Tensor::empty(Shape{2, 255}), gx = Tensor::empty(Shape{2, 255});
  try {
    dequantize_groups_apply(codes, meta, g, ActivationId::gelu, false, grad, gx);
    FAIL() << "a gradient of 510 elements for codes of 512 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dequantize_groups_apply: 510 elements"), std::string::npos) << e.what();
  }
}

// The store on a device (the emulated GPU: the same code path as a GPU, the CPU's kernels):
// apply_derivative gives the CPU store's floats, and makes no Workspace tensor of the values.
TEST(GroupApplyDerivative, TheStoreOnADeviceAppliesTheDerivativeWithoutAWorkspaceCopy) {
  testing::EmulatedGpu emulated;
  const Tensor x = Tensor::from_vector(Shape{4, 8, 16, 16}, testing::group_values(4 * 8 * 16 * 16, 9));
  const Tensor grad = Tensor::from_vector(x.shape(), testing::group_values(x.numel(), 10));
  testing::expect_derivative_applied_without_workspace_copy([] { return std::make_unique<GroupStore>(); }, x, grad,
                                                            "actnn");
}

TEST(GroupApplyDerivativeDevice, CudaKernelGivesTheFloatsOfTheTwoCudaPasses) {
  PACKRAT_SKIP_WITHOUT_GPU();
  for_each_case_on(Device::cuda(0), [](const testing::GroupCase& k, const Activation& a, const Tensor& one,
                                       const Tensor& two) {
    EXPECT_EQ(one.device(), Device::cuda(0));
    ASSERT_TRUE(same_floats(one, two)) << k.name() << " activation " << static_cast<int>(a.id);
  });
}

}  // namespace
}  // namespace packrat
