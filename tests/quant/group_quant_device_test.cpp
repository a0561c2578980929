// The per-group codec on a GPU: the CUDA kernels write the CPU's codes, metadata and variance
// bounds byte for byte, and decode to the same floats. (Without a GPU, group_quant_warp_test.cpp
// replays the kernels' warps on the host against the same CPU bytes.)
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/build_config.h"
#include "core/philox.h"
#include "quant/group_quant.h"
#include "tests/support/group_cases.h"
#include "tests/support/gpu.h"

namespace packrat {
namespace {

const QuantNoise kNoise{0x5EEDull, quant_stream(7, 2)};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  return std::vector<uint8_t>(h.data<uint8_t>(), h.data<uint8_t>() + h.numel());
}

TEST(GroupQuantDevice, CudaKernelsWriteTheCpuBytes) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  for (const testing::GroupCase& k : testing::group_cases()) {
    const int64_t n = k.samples * k.span;
    const Tensor x = Tensor::from_vector(Shape{k.samples, k.span}, testing::group_values(n, static_cast<uint64_t>(k.c.bits + k.c.group_size)));
    const GroupGeometry g = group_geometry(n, k.samples, k.c, k.plane);
    auto buffers = [&](Device d) {
      return std::pair{Tensor::empty(Shape{g.code_bytes()}, DType::u8, Layout::Plain, MemTag::Saved, d),
                       Tensor::empty(Shape{g.meta_bytes()}, DType::u8, Layout::Plain, MemTag::Saved, d)};
    };
    auto [codes, meta] = buffers(Device::cpu());
    auto [gcodes, gmeta] = buffers(gpu);
    std::vector<double> range_sq, grange_sq;
    quantize_groups(x, g, k.c.rounding, kNoise, codes, meta, &range_sq);
    quantize_groups(x.to(gpu), g, k.c.rounding, kNoise, gcodes, gmeta, &grange_sq);
    ASSERT_EQ(bytes_of(gcodes), bytes_of(codes)) << k.name() << ": codes";
    ASSERT_EQ(bytes_of(gmeta), bytes_of(meta)) << k.name() << ": metadata";
    ASSERT_EQ(grange_sq, range_sq) << k.name() << ": variance bounds";

    Tensor out = Tensor::empty(x.shape()), gout = Tensor::empty(x.shape(), DType::f32, Layout::Plain, MemTag::Saved, gpu);
    dequantize_groups(codes, meta, g, out);
    dequantize_groups(gcodes, gmeta, g, gout);
    const std::vector<float> a = out.to_vector(), b = gout.to(Device::cpu()).to_vector();
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << k.name() << ": dequantized values";
  }
}

}  // namespace
}  // namespace packrat
