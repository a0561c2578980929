// The per-group codec on a GPU: the CUDA kernels write the CPU's codes, metadata and variance
// bounds byte for byte, and decode to the same floats. (Without a GPU, group_quant_warp_test.cpp
// replays the kernels' warps on the host against the same CPU bytes.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/build_config.h"
#include "core/philox.h"
#include "quant/group/group_quant.h"
#include "tests/quant/nhwc_cases.h"
#include "tests/support/gpu.h"
#include "tests/support/group_cases.h"

namespace packrat {
namespace {

const QuantNoise kNoise{0x5EEDull, quant_stream(7, 2)};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  return std::vector<uint8_t>(h.data<uint8_t>(), h.data<uint8_t>() + h.numel());
}

// g's code and metadata buffers on d.
std::pair<Tensor, Tensor> code_and_meta_buffers(const GroupGeometry& g, Device d) {
  return {Tensor::empty(Shape{g.code_bytes()}, DType::u8, Layout::Plain, MemTag::Saved, d),
          Tensor::empty(Shape{g.meta_bytes()}, DType::u8, Layout::Plain, MemTag::Saved, d)};
}

TEST(GroupQuantDevice, CudaKernelsWriteTheCpuBytes) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  for (const testing::GroupCase& k : testing::group_cases()) {
    const int64_t n = k.samples * k.span;
    const Tensor x = Tensor::from_vector(Shape{k.samples, k.span},
                                         testing::group_values(n, static_cast<uint64_t>(k.c.bits + k.c.group_size)));
    const GroupGeometry g = group_geometry(n, k.samples, k.c, k.plane);
    auto [codes, meta] = code_and_meta_buffers(g, Device::cpu());
    auto [gcodes, gmeta] = code_and_meta_buffers(g, gpu);
    std::vector<double> range_sq, grange_sq;
    quantize_groups(x, g, k.c.rounding, kNoise, codes, meta, &range_sq);
    quantize_groups(x.to(gpu), g, k.c.rounding, kNoise, gcodes, gmeta, &grange_sq);
    ASSERT_EQ(bytes_of(gcodes), bytes_of(codes)) << k.name() << ": codes";
    ASSERT_EQ(bytes_of(gmeta), bytes_of(meta)) << k.name() << ": metadata";
    ASSERT_EQ(grange_sq, range_sq) << k.name() << ": variance bounds";

    Tensor out = Tensor::empty(x.shape()),
           gout = Tensor::empty(x.shape(), DType::f32, Layout::Plain, MemTag::Saved, gpu);
    dequantize_groups(codes, meta, g, out);
    dequantize_groups(gcodes, gmeta, g, gout);
    const std::vector<float> a = out.to_vector(), b = gout.to(Device::cpu()).to_vector();
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << k.name() << ": dequantized values";
  }
}

// An NHWC tensor (what the CUDA convolutions make) quantizes to the CPU's bytes of its plain copy,
// ReLU-like zeros, zero extremes of either sign and NaN values included: through the tile-free
// quads kernel where it takes the shape (quant/cuda/quad_quantize.h), the staged one
// (quant/group/nhwc_tile.h) elsewhere and everywhere under PACKRAT_QUANTIZE=staged
// (scripts/device_check.sh runs this suite with it as its EXPERIMENT).
TEST(GroupQuantDevice, NhwcTensorsQuantizeToThePlainTensorsBytes) {
  PACKRAT_SKIP_WITHOUT_GPU();
  using namespace nhwc_cases;
  const Device gpu = Device::cuda(0);
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.insert(cases.end(), std::begin(kQuadCases), std::end(kQuadCases));
  for (const Case& k : cases)
    for (int bits : {1, 2, 3, 4, 8})
      for (Rounding rounding : {Rounding::Stochastic, Rounding::Nearest}) {
        const std::string what =
            k.name() + " " + std::to_string(bits) + " bits, " + std::string(rounding_name(rounding));
        const GroupGeometry g = geometry_of(k, bits);
        const Tensor x =
            Tensor::from_vector(Shape{k.n, k.c, k.h, k.w}, hostile_values(g.numel, g.group_size, 5 + bits));
        const Tensor nhwc = backend(gpu).to_layout(x.to(gpu), Layout::NHWC);
        const CodecOrder order = codec_order(nhwc, g);
        ASSERT_TRUE(order.walk.nhwc) << what;
        auto [codes, meta] = code_and_meta_buffers(g, Device::cpu());
        auto [gcodes, gmeta] = code_and_meta_buffers(g, gpu);
        std::vector<double> range_sq, grange_sq;
        quantize_groups(x, g, rounding, kNoise, codes, meta, &range_sq);
        quantize_groups(nhwc, g, rounding, kNoise, gcodes, gmeta, &grange_sq, order.walk);
        EXPECT_EQ(bytes_of(gcodes), bytes_of(codes)) << what << ": codes";
        EXPECT_EQ(bytes_of(gmeta), bytes_of(meta)) << what << ": metadata";
        ASSERT_EQ(grange_sq.size(), range_sq.size()) << what;
        for (size_t i = 0; i < range_sq.size(); ++i) {
          if (std::isnan(range_sq[i])) {  // a NaN first value's group
            EXPECT_TRUE(std::isnan(grange_sq[i])) << what << ": group " << i;
            continue;
          }
          EXPECT_EQ(grange_sq[i], range_sq[i]) << what << ": group " << i;
        }
      }
}

}  // namespace
}  // namespace packrat
