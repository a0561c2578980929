// The bias bodies behind the CUDA convolution and matmul (core/cuda/kernels/bias.h), run on the
// host: the convolution's bias added per channel and its gradient summed per channel (against
// the CPU backend's convolution), the matmul's bias broadcast before cuBLAS, the column sums in
// row parts (against the CPU backend's column_sums), and the arguments packrat passes to cuBLAS
// (a column-major GEMM written out here plays cuBLAS). cuDNN and cuBLAS themselves need a GPU.
#include "core/cuda/gemm_args.h"
#include "core/cuda/kernels/bias.h"
#include "core/cuda/matmul_kernels.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::run_channel_finalize_on_host;
using testing::run_on_host;

ConvGeometry conv_geometry(int64_t N, int64_t Cin, int64_t H, int64_t W, int64_t Cout) {
  ConvGeometry g{N, Cin, H, W, Cout, 3, 3, 0, 0, 2, 1, 1, 1, 1, 1, 1, true};
  g.OH = (H + 2 - 3) / 2 + 1;
  g.OW = (W + 2 - 3) / 1 + 1;
  return g;
}

// The split a GPU block of the channel-sum kernel takes (see cuda_kernels_batchnorm_test.cpp).
std::vector<double> host_channel_partials(const float* g, int64_t N, int64_t C, int64_t HW, int splits) {
  std::vector<double> partial(static_cast<size_t>(C * splits * 2));
  const int64_t count = N * HW, chunk = (count + splits - 1) / splits;
  const cuda::SumTerm term{g};
  for (int64_t c = 0; c < C; ++c)
    for (int s = 0; s < splits; ++s) {
      double a = 0, b = 0;
      for (int64_t j = s * chunk; j < count && j < (s + 1) * chunk; ++j)
        term(c, cuda::channel_element(c, j, C, HW), a, b);
      partial[static_cast<size_t>((c * splits + s) * 2)] = a;
      partial[static_cast<size_t>((c * splits + s) * 2 + 1)] = b;
    }
  return partial;
}

TEST(CudaKernelsDnn, ConvolutionBiasAndItsGradientMatchTheCpuBackend) {
  Backend& cpu = backend(Device::cpu());
  const ConvGeometry g = conv_geometry(3, 2, 7, 5, 5);  // odd sizes, stride 2 in height
  ConvGeometry unbiased = g;
  unbiased.has_bias = false;
  const Tensor x = host_random({g.N, g.Cin, g.H, g.W}, 1), w = host_random({g.Cout, g.Cin, g.KH, g.KW}, 2);
  const Tensor bias = host_random({g.Cout}, 3), gy = host_random({g.N, g.Cout, g.OH, g.OW}, 4);
  // Forward: the CPU's biased output = its unbiased output + the body's bias.
  const Tensor want = cpu.to_layout(cpu.conv_forward(x, w, bias, g, false), Layout::Plain);
  Tensor y = cpu.to_layout(cpu.conv_forward(x, w, Tensor(), unbiased, false), Layout::Plain).clone();
  run_on_host(y.numel(), cuda::AddChannelBias{y.data<float>(), bias.data<float>(), g.Cout, g.OH * g.OW});
  expect_close(y.to_vector(), want.to_vector(), 1e-5f, 1e-5f, "y");

  // Bias gradient: per-channel sums of gy in splits.
  Tensor want_gw, want_gb;
  cpu.conv_backward_weights(cpu.conv_input(x, g), gy, g, want_gw, want_gb);
  for (const int splits : {1, 2, 7}) {
    const std::vector<double> partial = host_channel_partials(gy.data<float>(), g.N, g.Cout, g.OH * g.OW, splits);
    std::vector<float> gb(static_cast<size_t>(g.Cout));
    run_channel_finalize_on_host(cuda::ChannelPartials{partial.data(), splits}, g.Cout,
                                 cuda::ChannelSumFinalize{gb.data()});
    expect_close(gb, want_gb.to_vector(), 1e-6f, 1e-6f, fmt::format("bias gradient, {} splits", splits));
  }
}

TEST(CudaKernelsDnn, MatmulBiasIsBroadcastToEveryRowBeforeTheProduct) {
  Backend& cpu = backend(Device::cpu());
  const int64_t rows = 7, K = 4, N = 5;
  const Tensor a = host_random({rows, K}, 1), b = host_random({K, N}, 2), bias = host_random({N}, 3);
  const Tensor want = cpu.matmul(a, false, b, false, 1, rows, K, N, bias, Shape{rows, N});
  // What cuBLAS does with beta = 1: c = bias rows, then c += a @ b (here the CPU's product).
  Tensor c = Tensor::empty(Shape{rows, N});
  run_on_host(c.numel(), cuda::BroadcastRow{c.data<float>(), bias.data<float>(), N});
  const Tensor product = cpu.matmul(a, false, b, false, 1, rows, K, N, Tensor(), Shape{rows, N});
  for (int64_t i = 0; i < c.numel(); ++i) c.data<float>()[i] += product.data<float>()[i];
  expect_close(c.to_vector(), want.to_vector(), 1e-6f, 1e-6f, "c");
}

// cublasSgemmStridedBatched's definition on column-major matrices: C = alpha op(A) op(B) + beta C,
// op(X)[i, l] = X[i + l ld] or, transposed, X[l + i ld].
void column_major_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, int64_t sa,
                       const float* B, int64_t ldb, int64_t sb, float beta, float* C, int64_t ldc, int64_t sc,
                       int64_t batch) {
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l) {
          const float av = A[p * sa + (ta ? l + i * lda : i + l * lda)];
          const float bv = B[p * sb + (tb ? j + l * ldb : l + j * ldb)];
          s += double(av) * bv;
        }
        float& c = C[p * sc + i + j * ldc];
        c = static_cast<float>(s + beta * c);
      }
}

TEST(CudaKernelsDnn, CublasArgumentsComputeTheRowMajorMatmulForEveryTranspose) {
  Backend& cpu = backend(Device::cpu());
  for (const int64_t batch : {1, 3})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const bool with_bias : {false, true}) {
          SCOPED_TRACE(fmt::format("batch={} trans_a={} trans_b={} bias={}", batch, ta, tb, with_bias));
          const int64_t M = 5, K = 7, N = 3;
          const Tensor a = host_random(ta ? Shape{batch, K, M} : Shape{batch, M, K}, 1);
          const Tensor b = host_random(tb ? Shape{batch, N, K} : Shape{batch, K, N}, 2);
          const Tensor bias = with_bias ? host_random({N}, 3) : Tensor();
          const Tensor want = cpu.matmul(a, ta, b, tb, batch, M, K, N, bias, Shape{batch, M, N});
          Tensor c = Tensor::zeros(Shape{batch, M, N});
          if (with_bias) run_on_host(c.numel(), cuda::BroadcastRow{c.data<float>(), bias.data<float>(), N});
          const cuda::GemmArgs g = cuda::gemm_args(ta, tb, M, K, N);
          column_major_gemm(g.transpose_first, g.transpose_second, g.m, g.n, g.k, b.data<float>(), g.ld_first,
                            g.stride_first, a.data<float>(), g.ld_second, g.stride_second, with_bias ? 1.0f : 0.0f,
                            c.data<float>(), g.ld_out, g.stride_out, batch);
          expect_close(c.to_vector(), want.to_vector(), 1e-5f, 1e-5f, "c");
        }
}

TEST(CudaKernelsDnn, ColumnSumsInRowPartsMatchTheCpuBackend) {
  Backend& cpu = backend(Device::cpu());
  for (const auto& [M, N] : std::vector<std::pair<int64_t, int64_t>>{{301, 37}, {1, 3}, {4096, 2}, {70, 1000}}) {
    const Tensor m = host_random({M, N}, 5);
    const Tensor want = cpu.column_sums(m, M, N);
    const int64_t planned = cuda::column_parts(M, N);
    EXPECT_GE(planned, 1);
    EXPECT_TRUE(planned == 1 || M / planned >= 64) << "each part sums at least 64 rows";
    for (const int64_t parts : {planned, int64_t{1}, std::min<int64_t>(M, 7)}) {
      SCOPED_TRACE(fmt::format("M={} N={} parts={}", M, N, parts));
      std::vector<double> partial(static_cast<size_t>(parts * N));
      std::vector<float> got(static_cast<size_t>(N));
      run_on_host(parts * N, cuda::ColumnPartialSums{m.data<float>(), partial.data(), M, N, parts});
      run_on_host(N, cuda::ColumnSumsFinalize{partial.data(), got.data(), N, parts});
      expect_close(got, want.to_vector(), 1e-6f, 1e-6f, "column sums");
    }
  }
}

}  // namespace
}  // namespace packrat
