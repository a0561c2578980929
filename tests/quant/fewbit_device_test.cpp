// The few-bit codec on a GPU. Without one: the bodies its CUDA kernels run (quant/fewbit/fewbit_device.h),
// thread by thread on the host (the encode's pair exchange replayed warp by warp), write the CPU kernel's codes and forward values and decode to its
// floats, for every kind (table, step mask, boolean mask) and width. With one: the CUDA kernels do.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "autograd/pointwise.h"
#include "core/backend.h"
#include "core/build_config.h"
#include "core/philox.h"
#include "quant/fewbit/fewbit_device.h"
#include "quant/fewbit/fewbit_table.h"
#include "tests/support/host_launch.h"
#include "tests/support/gpu.h"

namespace packrat {
namespace {

std::vector<float> values(int64_t n, uint64_t seed) {
  PhiloxStream s(seed, 5);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = -6.0f + 12.0f * s.uniform();
  if (n > 3) v[3] = 0.0f;  // the relu family's kink
  return v;
}

struct Case {
  std::string name;
  FewbitCoder c;
  const Pointwise* fn;  // null: codes only
  bool with_y;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int bits : {1, 2, 3, 4})
    for (const char* f : {"gelu", "silu", "sigmoid"}) {
      FewbitCoder c;
      c.kind = FewbitKind::Table;
      c.bits = bits;
      c.lut = fewbit_table(f, bits).lut();
      out.push_back({std::string(f) + " table " + std::to_string(bits) + " bits", c, &pointwise_by_name(f), true});
      out.push_back({std::string(f) + " table codes only " + std::to_string(bits), c, nullptr, false});
    }
  for (const char* f : {"relu", "leaky_relu"}) {
    const Pointwise& fn = pointwise_by_name(f);
    FewbitCoder c;
    c.kind = FewbitKind::Step;
    c.bits = 1;
    c.step_hi = fn.df(1.0f);
    c.lut.levels[0] = fn.df(-1.0f);
    c.lut.levels[1] = c.step_hi;
    out.push_back({std::string(f) + " step", c, &fn, true});
    c.from_output = fn.derivative_from_output != nullptr;
    if (c.from_output) out.push_back({std::string(f) + " step from the output", c, &fn, false});
  }
  FewbitCoder mask;
  mask.kind = FewbitKind::Mask;
  mask.bits = 1;
  out.push_back({"mask", mask, nullptr, false});
  return out;
}

TEST(FewbitDevice, TheKernelBodiesWriteTheCpuKernelsCodesAndValues) {
  for (const Case& k : cases()) {
    for (int64_t n : {int64_t{1}, int64_t{4}, int64_t{8}, int64_t{13}, int64_t{1003}}) {
      const std::string what = k.name + " n " + std::to_string(n);
      const std::vector<float> x = values(n, static_cast<uint64_t>(n));
      std::vector<uint8_t> m(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) m[static_cast<size_t>(i)] = x[static_cast<size_t>(i)] > 0 ? 1 : 0;
      const bool is_mask = k.c.kind == FewbitKind::Mask;
      const void* src = is_mask ? static_cast<const void*>(m.data()) : x.data();
      const int64_t bytes = packed_bytes(n, k.c.bits);
      std::vector<uint8_t> packed(static_cast<size_t>(bytes)), body_packed(static_cast<size_t>(bytes), 0xEE);
      std::vector<float> y(static_cast<size_t>(n)), body_y(static_cast<size_t>(n), -9.0f);
      fewbit_encode(k.c, k.fn, src, is_mask ? 1 : sizeof(float), k.with_y ? y.data() : nullptr, n, packed.data());
      const int64_t quads = fewbit_quads(n);
      auto run = [&](auto a, auto b) {  // fewbit_encode_kernel: codes on every lane, then the even lanes store
        using A = decltype(a);
        constexpr int B = decltype(b)::value;
        const FewbitEncodeQuads<A, B> body{k.c, src, k.with_y ? body_y.data() : nullptr, n, body_packed.data()};
        for (int64_t t0 = 0; t0 < quads; t0 += 32) {
          uint32_t mine[32];
          for (int lane = 0; lane < 32; ++lane) mine[lane] = t0 + lane < quads ? body.codes(t0 + lane) : 0u;
          for (int lane = 0; lane < 32; lane += 2)
            if (t0 + lane < quads) body.store_pair(t0 + lane, mine[lane], mine[lane ^ 1]);
        }
      };
      auto with_bits = [&](auto a) {
        switch (k.c.bits) {
          case 1: run(a, std::integral_constant<int, 1>{}); break;
          case 2: run(a, std::integral_constant<int, 2>{}); break;
          case 3: run(a, std::integral_constant<int, 3>{}); break;
          default: run(a, std::integral_constant<int, 4>{}); break;
        }
      };
      if (k.fn) {
        with_activation(k.fn->id, with_bits);
      } else {
        with_bits(NoActivation{});
      }
      ASSERT_EQ(body_packed, packed) << what << ": codes";
      if (k.with_y) {
        ASSERT_EQ(std::memcmp(body_y.data(), y.data(), y.size() * sizeof(float)), 0) << what << ": f(x)";
      }

      // Decode, with and without an incoming gradient.
      const std::vector<float> g = values(n, 99);
      for (const float* grad : {g.data(), static_cast<const float*>(nullptr)}) {
        if (is_mask && !grad) continue;  // a mask is only applied
        std::vector<float> out(static_cast<size_t>(n)), body_out(static_cast<size_t>(n), -9.0f);
        fewbit_decode(k.c, packed.data(), grad, out.data(), n);
        auto decode = [&](auto b) {
          constexpr int B = decltype(b)::value;
          FewbitDecodeQuads<B> body{k.c.kind, {}, packed.data(), grad, body_out.data(), n};
          for (int i = 0; i < (1 << B); ++i) body.levels[i] = k.c.lut.levels[i];
          testing::run_on_host(quads, body);
        };
        switch (k.c.bits) {
          case 1: decode(std::integral_constant<int, 1>{}); break;
          case 2: decode(std::integral_constant<int, 2>{}); break;
          case 3: decode(std::integral_constant<int, 3>{}); break;
          default: decode(std::integral_constant<int, 4>{}); break;
        }
        ASSERT_EQ(std::memcmp(body_out.data(), out.data(), out.size() * sizeof(float)), 0)
            << what << (grad ? ": backward" : ": load");
      }
    }
  }
}

TEST(FewbitDevice, CudaKernelsWriteTheCpuCodes) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  for (const Case& k : cases()) {
    if (k.c.kind == FewbitKind::Mask) continue;  // u8 input: covered by the body test; f32 cases here
    const int64_t n = 100003;
    const Tensor x = Tensor::from_vector(Shape{n}, values(n, 7));
    const int64_t bytes = packed_bytes(n, k.c.bits);
    Tensor packed = Tensor::empty(Shape{bytes}, DType::u8), y = Tensor::empty(Shape{n});
    Tensor gpacked = Tensor::empty(Shape{bytes}, DType::u8, Layout::Plain, MemTag::Saved, gpu);
    Tensor gy = Tensor::empty(Shape{n}, DType::f32, Layout::Plain, MemTag::Activation, gpu);
    fewbit_encode(k.c, k.fn, x, k.with_y ? y : Tensor(), packed);
    fewbit_encode(k.c, k.fn, x.to(gpu), k.with_y ? gy : Tensor(), gpacked);
    const Tensor back = gpacked.to(Device::cpu());
    ASSERT_EQ(std::memcmp(back.raw(), packed.raw(), static_cast<size_t>(bytes)), 0) << k.name << ": codes";
    if (k.with_y) {
      // f(x) on the GPU: the same formula; nvcc may contract a multiply-add differently (last bit).
      const std::vector<float> a = y.to_vector(), b = gy.to(Device::cpu()).to_vector();
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(b[i], a[i], 1e-6f * (std::abs(a[i]) + 1e-3f)) << k.name << " " << i;
    }
    const Tensor g = Tensor::from_vector(Shape{n}, values(n, 8));
    Tensor out = Tensor::empty(Shape{n}), gout = Tensor::empty(Shape{n}, DType::f32, Layout::Plain, MemTag::Activation, gpu);
    fewbit_decode(k.c, packed, g, out);
    fewbit_decode(k.c, gpacked, g.to(gpu), gout);
    const std::vector<float> a = out.to_vector(), b = gout.to(Device::cpu()).to_vector();
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << k.name << ": backward";
  }
}

}  // namespace
}  // namespace packrat
