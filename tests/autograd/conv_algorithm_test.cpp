// The convolution algorithm setting: Auto may use Winograd, Direct never does; both agree.
#include <gtest/gtest.h>

#include "autograd/ops.h"
#include "core/cpu/conv.h"
#include "core/cpu/dnnl_context.h"
#include "tests/support/gradcheck.h"

using namespace packrat;

TEST(Conv2dOpAlgorithm, AutoMayUseWinogradDirectNeverAndTheyAgree) {
  const ConvAlgorithm before = conv_algorithm_setting();
  ConvGeometry g{16, 64, 32, 32, 64, 3, 3, 32, 32, 1, 1, 1, 1, 1, 1, 1, false};
  Tensor x = packrat::testing::random_tensor({16, 64, 32, 32}, 1);
  Tensor w = packrat::testing::random_tensor({64, 64, 3, 3}, 2, -0.05f, 0.05f);
  ops::Conv2dOptions o;
  o.pad_h = o.pad_w = 1;

  set_conv_algorithm(ConvAlgorithm::Direct);
  const std::string direct_impl = cpu::conv_layouts(g).implementation;
  EXPECT_EQ(direct_impl.find("wino"), std::string::npos) << direct_impl;
  const std::vector<float> direct = ops::conv2d(x, w, Tensor(), o).to_vector();

  set_conv_algorithm(ConvAlgorithm::Auto);
  const std::string impl = cpu::conv_layouts(g).implementation;
  const std::vector<float> automatic = ops::conv2d(x, w, Tensor(), o).to_vector();
  set_conv_algorithm(before);

  // Whether oneDNN takes Winograd for Auto depends on the CPU (its kernels are AVX-512 only, and
  // its heuristics differ by model), so the promise is: Winograd or Direct's own kernel, never a
  // third (gemm, reference), and the same outputs to rounding.
  EXPECT_TRUE(impl.find("wino") != std::string::npos || impl == direct_impl) << "oneDNN chose " << impl;
  if (!cpu::avx512_kernels()) {
    EXPECT_EQ(impl, direct_impl);
  }
  ASSERT_EQ(direct.size(), automatic.size());
  double worst = 0;
  for (size_t i = 0; i < direct.size(); ++i) worst = std::max(worst, std::abs(double(direct[i]) - automatic[i]));
  EXPECT_LT(worst, 1e-4);  // outputs are O(1): Winograd's rounding stays far below f32 training noise
}

// Deterministic asks a GPU for cuDNN's deterministic algorithms; oneDNN's are deterministic
// anyway, so on the CPU it is Auto, under its own plan key.
TEST(Conv2dOpAlgorithm, DeterministicIsAutoOnTheCpuUnderItsOwnKey) {
  const ConvAlgorithm before = conv_algorithm_setting();
  ConvGeometry g{4, 16, 12, 12, 16, 3, 3, 12, 12, 1, 1, 1, 1, 1, 1, 1, false};
  Tensor x = packrat::testing::random_tensor({4, 16, 12, 12}, 3);
  Tensor w = packrat::testing::random_tensor({16, 16, 3, 3}, 4, -0.1f, 0.1f);
  ops::Conv2dOptions o;
  o.pad_h = o.pad_w = 1;

  set_conv_algorithm(ConvAlgorithm::Auto);
  const std::string auto_key = g.key(), auto_impl = cpu::conv_layouts(g).implementation;
  const std::vector<float> automatic = ops::conv2d(x, w, Tensor(), o).to_vector();
  set_conv_algorithm(ConvAlgorithm::Deterministic);
  const std::string key = g.key(), impl = cpu::conv_layouts(g).implementation;
  const std::vector<float> deterministic = ops::conv2d(x, w, Tensor(), o).to_vector();
  set_conv_algorithm(before);

  EXPECT_TRUE(key.ends_with(",deterministic")) << key;
  EXPECT_TRUE(auto_key.ends_with(",auto")) << auto_key;
  EXPECT_EQ(impl, auto_impl);
  EXPECT_EQ(deterministic, automatic);
}
