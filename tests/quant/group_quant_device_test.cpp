// The per-group codec on a GPU. Without one: the bodies its CUDA kernels run
// (quant/group_quant_device.h), run index by index on the host, write the CPU kernel's bytes. With
// one: the CUDA kernels write the CPU's codes, metadata and variance bounds byte for byte, and
// decode to the same floats.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/build_config.h"
#include "core/philox.h"
#include "quant/group_quant_device.h"
#include "tests/support/host_launch.h"
#include "tests/support/gpu.h"

namespace packrat {
namespace {

std::vector<float> values(int64_t n, uint64_t seed) {
  PhiloxStream s(seed, 3);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = -3.0f + 8.0f * s.uniform();
  for (int64_t i = 0; i < n && i < 40; ++i) v[static_cast<size_t>(i)] = 0.75f;  // a constant group when G <= 40
  for (int64_t i = 50; i < n && i < 60; ++i) v[static_cast<size_t>(i)] = i % 2 ? 0.0f : -0.0f;  // signed zeros
  return v;
}

struct Case {
  GroupQuantConfig c;
  int64_t samples, span, plane = 0;  // plane: per-plane grouping's channel plane
  std::string name() const {
    return "bits " + std::to_string(c.bits) + " G " + std::to_string(c.group_size) + " " +
           std::string(rounding_name(c.rounding)) + " " + std::string(meta_name(c.meta)) + " " +
           std::string(grouping_name(c.grouping)) + " " + std::to_string(samples) + "x" + std::to_string(span) +
           (plane ? " plane " + std::to_string(plane) : "");
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int bits : {1, 2, 3, 4, 8})
    for (int64_t G : {int64_t{7}, int64_t{33}, int64_t{256}, int64_t{1000}})
      for (Rounding r : {Rounding::Stochastic, Rounding::Nearest})
        for (MetaType m : {MetaType::BF16, MetaType::F32}) {
          Case k;
          k.c.bits = bits;
          k.c.group_size = G;
          k.c.rounding = r;
          k.c.meta = m;
          k.c.grouping = G == 33 ? Grouping::Flat : Grouping::PerSample;
          k.samples = 3;
          k.span = 1013;  // not a multiple of 8, of 128 or of any G
          out.push_back(k);
          if (G != 7) continue;
          k.c.grouping = Grouping::PerPlane;  // planes of 7 x 7 and 14 x 14: groups of 49, one or four a plane
          k.c.group_size = 64;
          for (int64_t plane : {49, 196}) {
            k.plane = plane;
            k.span = 5 * plane;
            out.push_back(k);
          }
        }
  return out;
}

const QuantNoise kNoise{0x5EEDull, quant_stream(7, 2)};

TEST(GroupQuantDevice, TheKernelBodiesWriteTheCpuKernelsBytes) {
  for (const Case& k : cases()) {
    const int64_t n = k.samples * k.span;
    const std::vector<float> x = values(n, static_cast<uint64_t>(k.c.bits * 7 + k.c.group_size));
    const GroupGeometry g = group_geometry(n, k.samples, k.c, k.plane);
    std::vector<uint8_t> codes(static_cast<size_t>(g.code_bytes())), meta(static_cast<size_t>(g.meta_bytes()));
    quantize_groups(x.data(), g, k.c.rounding, kNoise, codes.data(), meta.data());

    std::vector<uint8_t> body_codes(codes.size(), 0xEE);
    testing::run_on_host(g.groups() * g.blocks_per_group(),
                         QuantizeBlockBody{x.data(), g, k.c.rounding, kNoise, meta.data(), body_codes.data()});
    ASSERT_EQ(body_codes, codes) << k.name();

    std::vector<float> out(static_cast<size_t>(n)), body_out(static_cast<size_t>(n), -99.0f);
    dequantize_groups(codes.data(), meta.data(), g, out.data());
    testing::run_on_host(g.groups() * g.blocks_per_group(), DequantizeBlockBody{codes.data(), meta.data(), g, body_out.data()});
    ASSERT_EQ(std::memcmp(out.data(), body_out.data(), out.size() * sizeof(float)), 0) << k.name();
  }
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  return std::vector<uint8_t>(h.data<uint8_t>(), h.data<uint8_t>() + h.numel());
}

TEST(GroupQuantDevice, CudaKernelsWriteTheCpuBytes) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  for (const Case& k : cases()) {
    const int64_t n = k.samples * k.span;
    const Tensor x = Tensor::from_vector(Shape{k.samples, k.span}, values(n, static_cast<uint64_t>(k.c.bits + k.c.group_size)));
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
