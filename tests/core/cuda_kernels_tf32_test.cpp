// TF32 reads 16-bit values exactly (core/autocast.h, Tf32ForHalfOperands): cuDNN's convolution and
// cuBLAS's matmul allowed TF32 tensor cores, given bf16-rounded operands, give exact f32's results but
// for the order of the f32 sums; given operands with more bits, they lose TF32's 10-bit mantissa,
// which shows that TF32 ran, and only where allowed. Compiled always; skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/autocast.h"
#include "tests/support/gpu.h"
#include "tests/support/gradcheck.h"

namespace packrat {
namespace {

double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = got.to(Device::cpu()).to_vector(), w = want.to(Device::cpu()).to_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    num += (g[i] - w[i]) * static_cast<double>(g[i] - w[i]);
    den += w[i] * static_cast<double>(w[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

Tensor bf16_rounded(const Tensor& t) { return t.to(DType::bf16).to(DType::f32); }

TEST(CudaKernelsTf32, ReadsBf16RoundedOperandsExactly) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Device gpu = testing::first_gpu()->device();
  const Tf32Use before = tf32_use();
  set_tf32_use(Tf32Use{});  // exact f32 unless a Tf32ForHalfOperands scope says otherwise
  NoGradScope no_grad;
  const Tensor x = testing::random_tensor({32, 64, 32, 32}, 31).to(gpu);
  const Tensor w = testing::random_tensor({64, 64, 3, 3}, 32).to(gpu);
  const Tensor a = testing::random_tensor({256, 576}, 33).to(gpu), b = testing::random_tensor({576, 192}, 34).to(gpu);
  auto conv = [&](const Tensor& in, const Tensor& weight, bool tf32) {
    const Tf32ForHalfOperands scope(tf32);
    // (32, 64, 32, 32)
    return ops::conv2d(in, weight, Tensor(), ops::Conv2dOptions{1, 1, 1, 1}).to_layout(Layout::Plain);
  };
  auto matmul = [&](const Tensor& l, const Tensor& r, bool tf32) {
    const Tf32ForHalfOperands scope(tf32);
    return ops::matmul(l, r);  // (256, 192)
  };
  const Tensor xr = bf16_rounded(x), wr = bf16_rounded(w), ar = bf16_rounded(a), br = bf16_rounded(b);
  EXPECT_LT(relative_error(conv(xr, wr, true), conv(xr, wr, false)), 1e-5) << "bf16 values on TF32 convolutions";
  EXPECT_LT(relative_error(matmul(ar, br, true), matmul(ar, br, false)), 1e-5) << "bf16 values on TF32 matmuls";
  // f32 values lose TF32's bits: TF32 ran, and an exact call after a TF32 one ran exact (a convolution
  // plan made with TF32 once served the exact calls after it). cuDNN picks its tensor-core kernels for a
  // convolution of this size on Hopper.
  EXPECT_GT(relative_error(conv(x, w, true), conv(x, w, false)), 3e-5) << "f32 values lose bits: TF32 did not run";
  EXPECT_GT(relative_error(matmul(a, b, true), matmul(a, b, false)), 3e-5) << "f32 values lose bits: TF32 did not run";
  set_tf32_use(before);
}

}  // namespace
}  // namespace packrat
