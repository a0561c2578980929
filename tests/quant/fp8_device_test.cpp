// The CUDA kernels of the fp8 codec (quant/cuda/fp8_codec_cuda.cu) replayed on the host: the same
// PACKRAT_HD bodies over the same lanes, threads and quads, the warps' shuffles and the atomicMax
// included, write the CPU kernels' codes and scales byte for byte, and decode to the same floats.
// (The stores on the emulated GPU and on cuda:0: tests/quant/store_device_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "quant/fp8/fp8_codec.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

std::vector<float> values(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  PhiloxStream r(seed, 5);
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = (r.uniform() - 0.5f) * std::ldexp(1.0f, static_cast<int>(r.below(30)) - 15);
    if (i % 53 == 7) v[static_cast<size_t>(i)] = i % 2 ? -0.0f : 0.0f;
  }
  if (n > 100) {
    v[17] = std::numeric_limits<float>::quiet_NaN();
    v[60] = -std::numeric_limits<float>::infinity();
  }
  return v;
}

// fp8_encode_groups_kernel: thread t is lane t % lanes of group t / lanes; each lane's amax, the
// butterfly of __shfl_xor_sync over the group's lanes, then every lane's encode.
template <Fp8Format F>
void replay_group_encode(const float* x, const Fp8Geometry& g, uint8_t* codes, float* scales) {
  const Fp8GroupEncodeBody<F> body{x, g, codes, scales};
  const int lanes = fp8_group_lanes(g.group_size);
  std::vector<float> amax(static_cast<size_t>(lanes));
  for (int64_t group = 0; group < g.groups(); ++group) {
    for (int l = 0; l < lanes; ++l) amax[static_cast<size_t>(l)] = body.lane_amax(group, l, lanes);
    for (int offset = lanes / 2; offset > 0; offset /= 2) {
      std::vector<float> next = amax;
      for (int l = 0; l < lanes; ++l)
        next[static_cast<size_t>(l)] = std::fmax(amax[static_cast<size_t>(l)], amax[static_cast<size_t>(l ^ offset)]);
      amax = next;
    }
    for (int l = lanes - 1; l >= 0; --l) body.encode(group, l, lanes, amax[static_cast<size_t>(l)]);  // any order
  }
}

// fp8_amax_kernel over `threads` threads (a grid's worth, warps of 32), then Fp8TensorEncodeBody a
// quad a thread.
template <Fp8Format F>
void replay_tensor_encode(const float* x, int64_t n, int64_t threads, uint8_t* codes, float* scale) {
  uint32_t amax_bits = 0;  // the atomicMax's target, zeroed by cudaMemsetAsync
  for (int64_t warp = 0; warp < threads; warp += 32) {
    float m = 0;
    for (int64_t t = warp; t < warp + 32; ++t) m = std::fmax(m, fp8_amax_strided(x, t, n, threads));
    uint32_t bits;
    std::memcpy(&bits, &m, 4);
    amax_bits = std::max(amax_bits, bits);
  }
  float amax;
  std::memcpy(&amax, &amax_bits, 4);
  testing::run_quads_on_host(n, Fp8TensorEncodeBody<F>{x, n, &amax, codes, scale});
}

template <Fp8Format F>
void check_format(Fp8Format f) {
  for (int64_t n : {1, 5, 130, 1031, 40000}) {
    const std::vector<float> x = values(n, static_cast<uint64_t>(n));
    for (int64_t group_size : {0, 1, 3, 16, 128, 200, 4096}) {  // 0: per_tensor
      const Fp8Config c{f, group_size ? Fp8Scale::PerGroup : Fp8Scale::PerTensor, group_size ? group_size : 128};
      SCOPED_TRACE(std::string(fp8_format_name(f)) + " n=" + std::to_string(n) + " G=" + std::to_string(group_size));
      const Fp8Geometry g = fp8_geometry(n, c);
      std::vector<uint8_t> cpu_codes(static_cast<size_t>(n)), dev_codes(static_cast<size_t>(n), 0xAA);
      std::vector<float> cpu_scales(static_cast<size_t>(g.groups())), dev_scales(static_cast<size_t>(g.groups()), -1.0f);
      fp8_encode_host(x.data(), f, c.scale, g, cpu_codes.data(), cpu_scales.data());
      if (c.scale == Fp8Scale::PerGroup) {
        replay_group_encode<F>(x.data(), g, dev_codes.data(), dev_scales.data());
      } else {
        replay_tensor_encode<F>(x.data(), n, 256 * ((n + 7) / 8 / 256 + 1), dev_codes.data(), dev_scales.data());
      }
      ASSERT_EQ(dev_codes, cpu_codes);
      ASSERT_EQ(0, std::memcmp(dev_scales.data(), cpu_scales.data(), cpu_scales.size() * 4));

      std::vector<float> cpu_out(static_cast<size_t>(n)), dev_out(static_cast<size_t>(n), -7.0f);
      fp8_decode_host(cpu_codes.data(), cpu_scales.data(), f, g, cpu_out.data());
      testing::run_quads_on_host(n, Fp8DecodeBody<F>{cpu_codes.data(), cpu_scales.data(), g, dev_out.data()});
      ASSERT_EQ(0, std::memcmp(dev_out.data(), cpu_out.data(), cpu_out.size() * 4));
    }
  }
}

TEST(Fp8Device, E4m3KernelsReplayedOnTheHostWriteTheCpuBytes) { check_format<Fp8Format::E4M3>(Fp8Format::E4M3); }

TEST(Fp8Device, E5m2KernelsReplayedOnTheHostWriteTheCpuBytes) { check_format<Fp8Format::E5M2>(Fp8Format::E5M2); }

}  // namespace
}  // namespace packrat
