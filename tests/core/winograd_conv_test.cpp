// packrat's bf16 Winograd F(2x2, 3x3) convolution (core/cpu/winograd_conv.h) against oneDNN's direct
// bf16 kernels, whose sums of the same bf16 products are f32's: the forward (with and without a
// bias) and the data gradient, on planes of even and odd sides, 64 to 128 channels (output chunks
// of 16, 48 and 64 channels). It runs where the CPU has AVX512_BF16 without AMX; elsewhere the
// tests say why they skip, and the last one checks that no other CPU takes the kernel.
#include "core/cpu/winograd_conv.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/cpu/conv.h"
#include "core/cpu/dnnl_context.h"
#include "core/cpu/layout.h"
#include "tests/support/gradcheck.h"

namespace packrat {
namespace {

struct WinogradCase {
  int64_t n, cin, cout, side;
  bool bias;
};

ConvGeometry geometry(const WinogradCase& c) {
  ConvGeometry g{c.n, c.cin, c.side, c.side, c.cout, 3, 3, c.side, c.side, 1, 1, 1, 1, 1, 1, 1, c.bias};
  g.dtype = DType::bf16;
  return g;
}

std::vector<float> values(const Tensor& t) { return t.to(DType::f32).to_layout(Layout::Plain).to_vector(); }

// The relative L2 distance of a from b.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// The kernel's outputs and the direct kernels' (ConvAlgorithm::Direct) for one case.
struct Outputs {
  std::string implementation, backward_implementation;
  std::vector<float> y, dx;
};
Outputs run(const WinogradCase& c, ConvAlgorithm algorithm) {
  const ConvAlgorithm before = conv_algorithm_setting();
  set_conv_algorithm(algorithm);
  const ConvGeometry g = geometry(c);
  const Tensor x = packrat::testing::random_tensor({c.n, c.cin, c.side, c.side}, 1).to_layout(Layout::nChw16c).to(DType::bf16);
  const Tensor w = packrat::testing::random_tensor({c.cout, c.cin, 3, 3}, 2, -0.2f, 0.2f);
  const Tensor b = c.bias ? packrat::testing::random_tensor({c.cout}, 3) : Tensor();
  const Tensor gy = packrat::testing::random_tensor({c.n, c.cout, c.side, c.side}, 4).to_layout(Layout::nChw16c);
  Outputs out;
  out.implementation = cpu::conv_layouts(g).implementation;
  out.backward_implementation = cpu::conv_backward_implementations(g).first;
  out.y = values(cpu::conv_forward(x, w, b, g, false));
  out.dx = values(cpu::conv_backward_data(cpu::conv_grad_output(gy, g), w, g));
  set_conv_algorithm(before);
  return out;
}

TEST(WinogradBf16, ForwardAndDataGradientAgreeWithTheDirectKernels) {
  // (every case 1024 tiles or more: kMinTiles)
  const WinogradCase cases[] = {{4, 64, 64, 32, false}, {16, 64, 80, 15, true}, {64, 128, 64, 8, false},
                                {4, 96, 112, 31, true}, {1024, 64, 64, 1, false}};
  for (const WinogradCase& c : cases) {
    SCOPED_TRACE(geometry(c).key());
    if (!cpu::winograd_bf16_serves(geometry(c))) GTEST_SKIP() << "this CPU has no AVX512_BF16, or has AMX";
    const Outputs winograd = run(c, ConvAlgorithm::Auto), direct = run(c, ConvAlgorithm::Direct);
    EXPECT_EQ(winograd.implementation, "packrat:winograd_f2x3_bf16");
    EXPECT_EQ(winograd.backward_implementation, "packrat:winograd_f2x3_bf16");
    EXPECT_EQ(direct.implementation.find("packrat"), std::string::npos) << direct.implementation;
    ASSERT_EQ(winograd.y.size(), direct.y.size());
    ASSERT_EQ(winograd.dx.size(), direct.dx.size());
    // The transformed inputs' bf16 rounding: about 3e-3 (a bf16 output's own rounding: 1e-3); a
    // wrong tile, channel or tap is an error of order 1.
    EXPECT_LT(relative_error(winograd.y, direct.y), 1e-2);
    EXPECT_LT(relative_error(winograd.dx, direct.dx), 1e-2);
    EXPECT_GT(relative_error(winograd.y, direct.y), 0.0);  // (it did not run the direct kernel)
  }
}

TEST(WinogradBf16, ServesOnlyBf16ThreeByThreeStrideOneConvolutionsOfEnoughWorkUnderAuto) {
  ConvGeometry g = geometry({16, 64, 64, 16, false});
  if (!cpu::winograd_bf16_serves(g)) {
    // Without AVX512_BF16 (or with AMX's faster direct kernels) nothing takes it.
    EXPECT_TRUE(!cpu::bf16_kernels() || cpu::amx_kernels() || !cpu::avx512_kernels());
    GTEST_SKIP() << "this CPU has no AVX512_BF16, or has AMX";
  }
  ConvGeometry f32 = g;
  f32.dtype = DType::f32;
  ConvGeometry strided = g;
  strided.stride_h = strided.stride_w = 2;
  strided.OH = strided.OW = 8;
  ConvGeometry odd_channels = g;
  odd_channels.Cin = 40;
  ConvGeometry grouped = g;
  grouped.groups = 2;
  ConvGeometry few_tiles = g;  // 512 tiles
  few_tiles.N = 8;
  ConvGeometry few_channels = g;
  few_channels.Cout = 32;
  EXPECT_FALSE(cpu::winograd_bf16_serves(f32));
  EXPECT_FALSE(cpu::winograd_bf16_serves(strided));
  EXPECT_FALSE(cpu::winograd_bf16_serves(odd_channels));
  EXPECT_FALSE(cpu::winograd_bf16_serves(grouped));
  EXPECT_FALSE(cpu::winograd_bf16_serves(few_tiles));
  EXPECT_FALSE(cpu::winograd_bf16_serves(few_channels));
  EXPECT_TRUE(cpu::winograd_bf16_serves(g));
  const ConvAlgorithm before = conv_algorithm_setting();
  set_conv_algorithm(ConvAlgorithm::Direct);
  EXPECT_FALSE(cpu::winograd_bf16_serves(g));
  set_conv_algorithm(before);
}

}  // namespace
}  // namespace packrat
