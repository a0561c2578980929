// The backend test, memory section: copy, fill, reorder and convert on every backend against
// host arithmetic; device placement and host-access errors.
#include "tests/core/backend_test_support.h"
#include "tests/support/errors.h"

namespace packrat {
namespace {

using testing::host_random;
using testing::host_values;

TEST(BackendMemory, CopyFillConvertAndReorderMatchTheHostOnEveryBackend) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const Tensor host = host_random({2, 32, 3, 5}, 11);
    Tensor x = host.to(b->device());
    EXPECT_EQ(x.device(), b->device());
    EXPECT_EQ(host_values(x), host.to_vector());

    Tensor y = Tensor::empty_like(x);
    b->copy(x, y);
    EXPECT_EQ(host_values(y), host.to_vector());

    b->fill(y, 1.5);
    EXPECT_EQ(host_values(y), std::vector<float>(static_cast<size_t>(y.numel()), 1.5f));
    Tensor z = Tensor::zeros({7}, DType::f32);
    EXPECT_EQ(host_values(z), std::vector<float>(7, 0.0f));

    // f32 -> i32 truncates toward zero, as static_cast does.
    Tensor i = Tensor::empty(x.shape(), DType::i32);
    b->convert(x, i);
    const std::vector<float> got = host_values(i);
    const std::vector<float> want = host.to_vector();
    for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(got[k], static_cast<float>(static_cast<int32_t>(want[k])));

    // Any layout the backend offers round-trips to the same logical values, between any two of them.
    const std::vector<Layout> layouts = {Layout::Plain, Layout::nChw16c, Layout::nChw8c, Layout::NHWC};
    for (Layout l : layouts) {
      Tensor r = b->to_layout(x, l);
      EXPECT_EQ(r.layout(), l);
      EXPECT_EQ(host_values(r), host.to_vector()) << layout_name(l);
      EXPECT_EQ(host_values(b->to_layout(r, Layout::Plain)), host.to_vector());
      for (Layout other : layouts) EXPECT_EQ(host_values(b->to_layout(r, other)), host.to_vector()) << layout_name(other);
      // Integer buffers (max-pool indices, masks) reorder the same way.
      const Tensor ri = b->to_layout(i, l);
      EXPECT_EQ(host_values(b->to_layout(ri, Layout::Plain)), got) << layout_name(l) << " i32";
    }
    // (That NHWC puts channels innermost is what cuDNN and oneDNN's AMX kernels read: BackendConv's
    // NHWC cases check it.)
  }
}

TEST(BackendMemory, CopyRangeCopiesOneRangeAndChecksItsBounds) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const Tensor host = host_random({10}, 12);
    const Tensor src = host.to(b->device());
    Tensor dst = Tensor::zeros({8});
    b->copy_range(src, 3, dst, 2, 5);  // dst[2..7) = src[3..8)
    const std::vector<float> h = host.to_vector(), got = host_values(dst);
    for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(got[i], i >= 2 && i < 7 ? h[i + 1] : 0.0f) << i;
    EXPECT_NE(testing::message_of([&] { b->copy_range(src, 6, dst, 0, 5); }).find("run past a buffer"), std::string::npos);
    Tensor wrong = Tensor::zeros({8}, DType::f64);
    EXPECT_NE(testing::message_of([&] { b->copy_range(src, 0, wrong, 0, 1); }).find("of one dtype"), std::string::npos);
  }
}

// A layout change that leaves a buffer's bytes where they are (one pixel a plane: squeeze-and-
// excitation's (N, C, 1, 1) scales; one channel: NHWC and plain) moves them as they are, every bit
// kept: a bf16 denormal too, which oneDNN's reference reorder (bf16 on AVX2) flushes to zero. The
// layouts a shape can take (C a multiple of the channel block), and a shape of many pixels and
// channels beside them, whose f32 values arrive through oneDNN's reorders.
TEST(BackendMemory, LayoutChangesOfOnePixelOrOneChannelKeepEveryBit) {
  const std::vector<Shape> shapes{Shape{3, 32, 1, 1}, Shape{2, 1, 3, 4}, Shape{2, 24, 1, 1}, Shape{2, 16, 2, 3}};
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const Shape& shape : shapes) {
      Tensor host = host_random(shape, 13);
      host.data<float>()[1] = 1e-39f;  // an f32 denormal, a bf16 one once rounded
      const Tensor x = host.to(dtype);
      const bool one_pixel_or_channel = shape[2] * shape[3] == 1 || shape[1] == 1;
      if (!one_pixel_or_channel && dtype != DType::f32) continue;
      std::vector<Layout> layouts{Layout::Plain, Layout::NHWC};
      for (const Layout blocked : {Layout::nChw8c, Layout::nChw16c})
        if (shape[1] % channel_block(blocked) == 0) layouts.push_back(blocked);
      for (const Layout from : layouts) {
        const Tensor a = x.to_layout(from);
        for (const Layout to : layouts) {
          const Tensor b = a.to_layout(to);
          ASSERT_EQ(b.layout(), to);
          const Tensor back = b.to_layout(Layout::Plain);
          ASSERT_EQ(std::memcmp(back.raw(), x.raw(), x.nbytes()), 0)
              << dtype_name(dtype) << " " << shape.str() << " " << layout_name(from) << " -> " << layout_name(to);
        }
      }
    }
  }
}

TEST(BackendMemory, NewTensorsGoToTheDeviceScope) {
  EXPECT_EQ(DeviceScope::current(), Device::cpu());
  EXPECT_EQ(Tensor::empty({3}).device(), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::parse("cuda").str(), "cuda:0");
  EXPECT_EQ(testing::message_of([] { Device::parse("gpu"); }), "unknown device 'gpu': expected cpu, cuda or cuda:N");
}

TEST(BackendMemory, OpsNameTheInputsOnDifferentDevices) {
  // With one device built, two CPU tensors always agree; the message is checked on the helper.
  Tensor a = Tensor::zeros({2}), b = Tensor::zeros({2});
  EXPECT_NO_THROW(check_same_device("add", {&a, &b}));
}

}  // namespace
}  // namespace packrat
