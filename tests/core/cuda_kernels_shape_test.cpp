// The CUDA shape kernels' bodies (core/cuda/kernels/shape.h), run on the host with no GPU against
// the CPU backend, byte for byte, in every dtype, on odd shapes. The element pitches passed to
// RunCopy are computed as cuda_backend_shape.cpp does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/backend.h"
#include "core/cuda/kernels/shape.h"
#include "core/typed_dispatch.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

using testing::host_random;
using testing::run_on_host;

Backend& cpu() { return backend(Device::cpu()); }

constexpr DType kAllDtypes[] = {DType::f32, DType::f64, DType::u8, DType::i32, DType::i64};

// Distinct-ish values of `dtype` (0..250 for the integer types, so u8 holds them).
Tensor host_values_of(const Shape& shape, DType dtype, uint64_t seed) {
  DeviceScope on_cpu(Device::cpu());
  const bool integer = dtype != DType::f32 && dtype != DType::f64;
  return host_random(shape, seed, integer ? 0.0f : -2.0f, integer ? 250.0f : 2.0f).to(dtype);
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw());
  return {p, p + t.nbytes()};
}

int64_t product(const Shape& s, int64_t from, int64_t to) {
  int64_t n = 1;
  for (int64_t i = from; i < to; ++i) n *= s[i];
  return n;
}

TEST(CudaKernelsShape, TransposeLast2MatchesTheCpuBackendInEveryDtype) {
  DeviceScope on_cpu(Device::cpu());
  for (const Shape& shape : {Shape{3, 40, 37}, Shape{5, 2}, Shape{2, 1, 7}, Shape{2, 3, 5, 1}}) {
    const int64_t M = shape[-2], N = shape[-1];
    for (DType dt : kAllDtypes) {
      const Tensor x = host_values_of(shape, dt, 1);
      const Tensor want = cpu().transpose_last2(x);
      Tensor y = Tensor::empty(want.shape(), dt);
      with_typed(y.raw(), dt, [&](auto* out) {
        using T = std::remove_pointer_t<decltype(out)>;
        run_on_host(x.numel(), cuda::TransposeLast2<T>{static_cast<const T*>(x.raw()), out, M, N});
      });
      EXPECT_EQ(bytes_of(y), bytes_of(want)) << shape.str() << " " << dtype_name(dt);
    }
  }
}

TEST(CudaKernelsShape, PermuteMatchesTheCpuBackendInEveryDtype) {
  DeviceScope on_cpu(Device::cpu());
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;
  };
  const std::vector<Case> cases{{Shape{2, 3, 4, 5}, {2, 0, 3, 1}}, {Shape{2, 3, 4, 5}, {0, 1, 2, 3}},
                                {Shape{7}, {0}},                    {Shape{3, 1, 5, 2, 3}, {4, 2, 0, 3, 1}},
                                {Shape{6, 5}, {1, 0}},              {Shape(), {}}};
  for (const Case& c : cases) {
    for (DType dt : kAllDtypes) {
      const Tensor x = host_values_of(c.shape, dt, 2);
      const Tensor want = cpu().permute(x, c.perm);
      const int64_t r = c.shape.rank();
      std::vector<int64_t> in_stride(static_cast<size_t>(r), 1);
      for (int64_t k = r - 2; k >= 0; --k) in_stride[k] = in_stride[k + 1] * c.shape[k + 1];
      // Both index types the launcher picks from: 32-bit offsets, and 64-bit ones for huge tensors.
      for (bool wide : {false, true}) {
        Tensor y = Tensor::empty(want.shape(), dt);
        with_typed(y.raw(), dt, [&](auto* out) {
          using T = std::remove_pointer_t<decltype(out)>;
          auto run = [&](auto index) {
            using Index = decltype(index);
            cuda::Permute<T, Index> body{static_cast<const T*>(x.raw()), out, static_cast<int>(r), {}, {}};
            for (int64_t k = 0; k < r; ++k) {
              body.out_dims[k] = static_cast<Index>(c.shape[c.perm[k]]);
              body.src_stride[k] = static_cast<Index>(in_stride[c.perm[k]]);
            }
            run_on_host(y.numel(), body);
          };
          if (wide) run(int64_t{0});
          else run(uint32_t{0});
        });
        EXPECT_EQ(bytes_of(y), bytes_of(want)) << c.shape.str() << " " << dtype_name(dt) << (wide ? " i64" : " u32");
      }
    }
  }
}

TEST(CudaKernelsShape, ConcatAndNarrowRunCopiesMatchTheCpuBackendInEveryDtype) {
  DeviceScope on_cpu(Device::cpu());
  for (int64_t dim : {0, 1, 2}) {
    for (DType dt : kAllDtypes) {
      const std::string what = "dim " + std::to_string(dim) + " " + std::string(dtype_name(dt));
      std::vector<Tensor> parts;
      for (int64_t size : {2, 1, 3}) {
        std::vector<int64_t> d{3, 5, 7};
        d[dim] = size;
        parts.push_back(host_values_of(Shape(d), dt, 10 + size));
      }
      const Tensor want = cpu().concat(parts, dim);
      Tensor y = Tensor::empty(want.shape(), dt);
      const int64_t outer = product(y.shape(), 0, dim), inner = product(y.shape(), dim + 1, 3);
      const int64_t out_run = y.dim(dim) * inner;
      int64_t offset = 0;
      for (const Tensor& t : parts) {
        const int64_t run = t.dim(dim) * inner;
        with_typed(y.raw(), dt, [&](auto* out) {
          using T = std::remove_pointer_t<decltype(out)>;
          run_on_host(outer * run, cuda::RunCopy<T>{static_cast<const T*>(t.raw()), out + offset, run, run, out_run});
        });
        offset += run;
      }
      EXPECT_EQ(bytes_of(y), bytes_of(want)) << "concat " << what;

      // narrow back out the middle part, and a slice that starts inside the first.
      for (const auto& [start, length] : std::vector<std::pair<int64_t, int64_t>>{{2, 1}, {1, 3}}) {
        const Tensor want_n = cpu().narrow(want, dim, start, length);
        Tensor n = Tensor::empty(want_n.shape(), dt);
        const int64_t in_run = want.dim(dim) * inner, run = length * inner;
        with_typed(n.raw(), dt, [&](auto* out) {
          using T = std::remove_pointer_t<decltype(out)>;
          run_on_host(outer * run,
                      cuda::RunCopy<T>{static_cast<const T*>(want.raw()) + start * inner, out, run, in_run, run});
        });
        EXPECT_EQ(bytes_of(n), bytes_of(want_n)) << "narrow " << what << " start " << start;
      }
    }
  }
}

TEST(CudaKernelsShape, PadChannelsSubsampleAndItsBackwardMatchTheCpuBackend) {
  DeviceScope on_cpu(Device::cpu());
  struct Case {
    int64_t N, Cin, H, W, Cout, stride;
  };
  for (const Case& c : {Case{2, 3, 5, 7, 8, 2}, Case{1, 16, 6, 6, 32, 2}, Case{2, 4, 3, 5, 5, 1}, Case{1, 2, 7, 4, 6, 3}}) {
    const int64_t Ho = (c.H + c.stride - 1) / c.stride, Wo = (c.W + c.stride - 1) / c.stride, front = (c.Cout - c.Cin) / 2;
    const std::string what = Shape{c.N, c.Cin, c.H, c.W}.str() + " -> " + std::to_string(c.Cout) + " stride " +
                             std::to_string(c.stride);
    const Tensor x = host_random({c.N, c.Cin, c.H, c.W}, 3), g = host_random({c.N, c.Cout, Ho, Wo}, 4);
    const Tensor want = cpu().pad_channels_subsample(x, c.Cout, c.stride).to_plain();
    Tensor y = Tensor::empty({c.N, c.Cout, Ho, Wo});
    run_on_host(y.numel(), cuda::PadChannelsSubsample{x.data<float>(), y.data<float>(), c.Cin, c.H, c.W, c.Cout, Ho, Wo,
                                                       c.stride, front});
    EXPECT_EQ(y.to_vector(), want.to_vector()) << what;
    const Tensor want_gx = cpu().pad_channels_subsample_backward(g, x.shape(), Layout::Plain, c.stride);
    Tensor gx = Tensor::empty(x.shape());
    run_on_host(gx.numel(), cuda::PadChannelsSubsampleBackward{g.data<float>(), gx.data<float>(), c.Cin, c.H, c.W,
                                                                c.Cout, Ho, Wo, c.stride, front});
    EXPECT_EQ(gx.to_vector(), want_gx.to_vector()) << what;
  }
}

// The thin transpose (plain <-> NHWC of convolution weights, of 3-channel images) moves what
// the general transpose body moves, whichever side is the short one.
TEST(CudaKernelsShape, ThinTransposeMovesWhatTheGeneralTransposeMoves) {
  DeviceScope on_cpu(Device::cpu());
  struct Case {
    int64_t N, R, S;
  };
  for (const Case c :
       {Case{5, 37, 9}, Case{3, 9, 37}, Case{2, 1, 7}, Case{4, 7, 1}, Case{2, 16, 16}, Case{1, 3, 1030}}) {
    const std::string what = std::to_string(c.N) + "x" + std::to_string(c.R) + "x" + std::to_string(c.S);
    ASSERT_TRUE(c.R <= cuda::kThinSide || c.S <= cuda::kThinSide) << what;
    const Tensor x = host_random({c.N, c.R, c.S}, 9);
    Tensor want = Tensor::empty({c.N, c.S, c.R}), got = Tensor::empty({c.N, c.S, c.R});
    run_on_host(want.numel(), cuda::TransposeLast2<float>{x.data<float>(), want.data<float>(), c.R, c.S});
    cpu().fill(got, -1.0);
    run_on_host(cuda::thin_transpose_indices(c.N, c.R, c.S),
                cuda::ThinTranspose<float>{x.data<float>(), got.data<float>(), c.R, c.S});
    EXPECT_EQ(bytes_of(got), bytes_of(want)) << what;
  }
}

TEST(CudaKernelsShape, CausalMaskMatchesTheCpuBackend) {
  DeviceScope on_cpu(Device::cpu());
  for (const Shape& shape : {Shape{2, 3, 5}, Shape{4, 4}, Shape{1, 1}, Shape{2, 2, 1, 6}}) {
    Tensor want = host_random(shape, 5);
    Tensor s = want.clone();
    cpu().causal_mask_fill(want);
    run_on_host(s.numel(), cuda::CausalMaskFill{s.data<float>(), shape[-2], shape[-1]});
    EXPECT_EQ(bytes_of(s), bytes_of(want)) << shape.str();
    int64_t masked = 0;
    for (float v : s.to_vector()) masked += std::isinf(v) ? 1 : 0;
    if (shape == Shape{2, 3, 5}) {
      EXPECT_EQ(masked, 2 * 3);  // per (3, 5) matrix: keys 3, 4 hidden from query 0, key 4 from query 1
    }
  }
}

}  // namespace
}  // namespace packrat
