// The mixed and deterministic bucket quantizers on a GPU. Without one: the bodies their CUDA
// kernels run (quant/mixed/mixed_quant_device.h), run index by index on the host, write the CPU
// kernel's decisions, offsets, packed flags, metadata and codes byte for byte and decode to the
// same floats, for every variant, on sizes whose buckets leave a tail. With one: the CUDA
// kernels (warp reductions, CUB's scan) write the CPU's bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/philox.h"
#include "quant/bits/bitpack.h"
#include "quant/mixed/mixed_quant.h"
#include "quant/mixed/mixed_kernel_bodies.h"
#include "tests/support/errors.h"
#include "tests/support/gpu.h"
#include "tests/support/host_launch.h"
#include "tests/support/mixed_cases.h"

namespace packrat {
namespace {

std::vector<float> values(int64_t n, uint64_t seed) {
  PhiloxStream s(seed, 5);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = -3.0f + 8.0f * s.uniform();
  for (int64_t i = 0; i < n && i < 70; ++i) v[static_cast<size_t>(i)] = 0.75f;       // a constant bucket when B <= 70
  for (int64_t i = 70; i < n && i < 140; ++i) v[static_cast<size_t>(i)] = 0.0f;     // an all-zero one (sign-magnitude)
  for (int64_t i = 150; i < n && i < 160; ++i) v[static_cast<size_t>(i)] = i % 2 ? 0.0f : -0.0f;  // signed zeros
  return v;
}

using Case = testing::MixedCase;
std::vector<Case> cases() { return testing::mixed_cases(); }

constexpr int64_t kSizes[] = {1, 3037, 20000};  // none a multiple of 64, 100 or 512
const QuantNoise kNoise{0x5EEDull, quant_stream(9, 4)};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  if (!t.defined()) return {};
  const Tensor h = t.to(Device::cpu());
  return std::vector<uint8_t>(h.data<uint8_t>(), h.data<uint8_t>() + h.numel());
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The host's exclusive scan of (buckets + 1) byte counts, as CUB's DeviceScan writes it.
std::vector<int64_t> exclusive_scan(const std::vector<int64_t>& bytes) {
  std::vector<int64_t> out(bytes.size(), 0);
  for (size_t i = 1; i < bytes.size(); ++i) out[i] = out[i - 1] + bytes[i - 1];
  return out;
}

TEST(MixedQuantDevice, TheKernelBodiesWriteTheCpuKernelsBytes) {
  for (const Case& k : cases())
    for (int64_t n : kSizes) {
      const MixedQuantConfig& c = k.c;
      const std::string what = k.name + " numel " + std::to_string(n);
      const std::vector<float> x = values(n, static_cast<uint64_t>(n + c.base.code_bits * 31 + c.mix.code_bits));
      const MixedPacked p = quantize_mixed(x.data(), n, c, kNoise);  // the CPU kernel
      const BucketGeometry g = bucket_geometry(n, c.bucket_size);
      const MixedFormat f{g, c.base, c.mix, c.scale, c.meta};

      // Decisions and code offsets (the scan is CUB's on a GPU).
      std::vector<uint8_t> flags(static_cast<size_t>(g.buckets), 0xEE);
      std::vector<int64_t> bytes(static_cast<size_t>(g.buckets + 1), -1);
      testing::run_on_host(g.buckets + 1, DecideBucketsBody{c, g, kNoise, flags.data(), bytes.data()});
      const std::vector<int64_t> offsets = exclusive_scan(bytes);
      ASSERT_EQ(offsets.back(), p.codes.numel()) << what << ": code bytes";
      int64_t mixes = 0;
      for (uint8_t fl : flags) mixes += fl;
      ASSERT_EQ(mixes, p.mix_buckets) << what << ": mix buckets";
      if (!p.uniform) {
        std::vector<uint8_t> packed(static_cast<size_t>(packed_bytes(g.buckets, 1)), 0xEE);
        testing::run_on_host(packed_bytes(g.buckets, 1), PackFlagsBody{flags.data(), g.buckets, packed.data()});
        ASSERT_EQ(packed, bytes_of(p.flags)) << what << ": packed flags";
      }

      // Metadata, then codes from it, with the per-bucket flags and offsets.
      const BucketFlags by_bucket{flags.data(), false, false};
      const BucketOffsets by_scan{offsets.data(), 0};
      std::vector<uint8_t> meta(static_cast<size_t>(p.meta_data.numel()), 0xEE);
      testing::run_on_host(g.buckets, BucketMetaBody{x.data(), f, by_bucket, meta.data()});
      ASSERT_EQ(meta, bytes_of(p.meta_data)) << what << ": metadata";
      std::vector<uint8_t> codes(static_cast<size_t>(p.codes.numel()), 0xEE);
      const int64_t blocks = g.buckets * g.blocks_per_bucket();
      testing::run_on_host(blocks, QuantizeBucketBlockBody{x.data(), f, c.rounding, kNoise, by_bucket, by_scan,
                                                           meta.data(), codes.data()});
      ASSERT_EQ(codes, bytes_of(p.codes)) << what << ": codes";

      // One width for all (what the GPU entry point uses when the decision is per tensor or the
      // widths are equal): no flags, offsets by arithmetic.
      if (p.uniform) {
        const BucketWidth& w = p.uniform_is_mix ? c.mix : c.base;
        const BucketFlags uniform{nullptr, false, p.uniform_is_mix};
        const BucketOffsets arithmetic{nullptr, packed_bytes(g.bucket_size, w.code_bits)};
        std::vector<uint8_t> ucodes(codes.size(), 0xEE);
        testing::run_on_host(blocks, QuantizeBucketBlockBody{x.data(), f, c.rounding, kNoise, uniform, arithmetic,
                                                             meta.data(), ucodes.data()});
        ASSERT_EQ(ucodes, codes) << what << ": codes at one width";
      }

      // Dequantization from what the tensor holds: the packed flags (or none) and a scan of the bytes.
      const std::vector<uint8_t> packed_flags = bytes_of(p.flags);
      const BucketFlags held_flags{p.uniform ? nullptr : packed_flags.data(), true, p.uniform_is_mix};
      std::vector<int64_t> held_bytes(static_cast<size_t>(g.buckets + 1), -1);
      testing::run_on_host(g.buckets + 1, BucketBytesBody{f, held_flags, held_bytes.data()});
      ASSERT_EQ(exclusive_scan(held_bytes), offsets) << what << ": offsets from the held flags";
      std::vector<float> out(static_cast<size_t>(n)), body_out(static_cast<size_t>(n), -99.0f);
      dequantize_mixed(p, out.data());
      // The kernel's lanes, one lane a bucket, and a whole warp a bucket.
      for (int lanes : {dequantize_lanes(g.bucket_size), 1, kWarpLanes}) {
        std::fill(body_out.begin(), body_out.end(), -99.0f);
        testing::run_lanes_on_host(g.buckets, lanes, DequantizeBucketQuadsBody<>{codes.data(), meta.data(), f, held_flags,
                                                                               by_scan, StoreValues{body_out.data()}});
        ASSERT_TRUE(same_floats(body_out, out)) << what << ": dequantized values, lanes " << lanes;
      }
    }
}

// The CUDA quantize kernel's noise: each lane's block of 8 from its own four words (block8_noise)
// is rounding_noise16's, element by element, across the words' high half (block 2^30: word 2^32).
TEST(MixedQuantDevice, ALanesBlockNoiseIsEveryElementsRoundingNoise) {
  const uint64_t seed = 0x5EEDull, stream = bucket_stream(quant_stream(3, 1), 17);
  const NoiseKey key = noise_key(seed, stream);
  for (uint64_t block : {uint64_t{0}, uint64_t{1}, uint64_t{32} * 1001 + 5, (uint64_t{1} << 30) - 1, uint64_t{1} << 30}) {
    uint32_t half[8];
    block8_noise(key, block, half);
    for (int k = 0; k < 8; ++k)
      ASSERT_EQ(half[k], rounding_noise16(seed, stream, 8 * block + static_cast<uint64_t>(k))) << "block " << block << " element " << k;
  }
}

TEST(MixedQuantDevice, EntryPointsRefuseMixedDevicesAndNameTheBuild) {
  const std::vector<float> xs = values(300, 1);
  Tensor x = Tensor::from_vector(Shape{3, 100}, xs);
  MixedQuantConfig c;
  c.bucket_size = 64;
  const MixedPacked p = quantize_mixed(x, c, kNoise);
  ASSERT_FALSE(p.uniform);
  Tensor out = Tensor::empty(Shape{3, 100});
  out.storage()->device = Device::cuda(0);  // relabelled: the output claims a GPU, the codes are on the CPU
  const std::string m = testing::message_of([&] { dequantize_mixed(p, out); });
  out.storage()->device = Device::cpu();
  EXPECT_EQ(m, "dequantize_mixed: codes on cpu, metadata on cpu, flags on cpu, output on cuda:0");
  if (!PACKRAT_HAVE_CUDA) {
    x.storage()->device = Device::cuda(0);
    const std::string q = testing::message_of([&] { quantize_mixed(x, c, kNoise); });
    x.storage()->device = Device::cpu();
    EXPECT_EQ(q, "quantize_mixed: the input is on cuda:0, but this packrat was built without CUDA");
  }
  const std::string d = testing::message_of([&] { quantize_mixed(Tensor::empty(Shape{4}, DType::f64), c, kNoise); });
  EXPECT_EQ(d, "quantize_mixed: the input is (4,) f64 plain, expected f32 (or bf16 on the CPU)");
}

TEST(MixedQuantDevice, CudaKernelsWriteTheCpuBytes) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Device gpu = testing::first_gpu()->device();
  for (const Case& k : cases())
    for (int64_t n : kSizes) {
      const MixedQuantConfig& c = k.c;
      const std::string what = k.name + " numel " + std::to_string(n);
      const Tensor x = Tensor::from_vector(Shape{n}, values(n, static_cast<uint64_t>(n + c.base.code_bits * 31 + c.mix.code_bits)));
      const MixedPacked p = quantize_mixed(x, c, kNoise);
      const MixedPacked gp = quantize_mixed(x.to(gpu), c, kNoise);
      ASSERT_EQ(gp.codes.device(), gpu) << what;
      ASSERT_EQ(gp.mix_buckets, p.mix_buckets) << what << ": mix buckets";
      ASSERT_EQ(gp.uniform, p.uniform) << what;
      ASSERT_EQ(gp.uniform_is_mix, p.uniform_is_mix) << what;
      ASSERT_EQ(bytes_of(gp.flags), bytes_of(p.flags)) << what << ": packed flags";
      ASSERT_EQ(bytes_of(gp.meta_data), bytes_of(p.meta_data)) << what << ": metadata";
      ASSERT_EQ(bytes_of(gp.codes), bytes_of(p.codes)) << what << ": codes";
      ASSERT_EQ(gp.bytes(), p.bytes()) << what << ": bytes held";

      Tensor out = Tensor::empty(Shape{n});
      Tensor gout = Tensor::empty(Shape{n}, DType::f32, Layout::Plain, MemTag::Workspace, gpu);
      dequantize_mixed(p, out);
      dequantize_mixed(gp, gout);
      ASSERT_TRUE(same_floats(gout.to(Device::cpu()).to_vector(), out.to_vector())) << what << ": dequantized values";
    }
}

// An NHWC tensor on a GPU (its buckets staged in plain order: quant/mixed/nhwc_buckets.h) gets the plain
// tensor's bytes, decodes into NHWC to its floats, and applies a GELU's derivative from its codes
// in NHWC as the plain tensor does: pixels of 8 channels (planes of 63), quads (12 channels),
// single channels (5), planes of 1024.
TEST(MixedQuantDevice, CudaKernelsWalkAnNhwcTensorInPlainOrder) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Device gpu = testing::first_gpu()->device();
  Backend& be = backend(gpu);
  const Shape shapes[] = {{2, 32, 9, 7}, {3, 12, 8, 8}, {2, 5, 7, 9}, {1, 8, 32, 32}};
  for (const Shape& shape : shapes)
    for (const Case& k : cases()) {
      const MixedQuantConfig& c = k.c;
      const std::string what = k.name + " shape " + shape.str();
      const int64_t n = shape.numel();
      const Tensor x = Tensor::from_vector(shape, values(n, static_cast<uint64_t>(n + c.bucket_size)));
      const Tensor grad = Tensor::from_vector(shape, values(n, 3));
      const Tensor nhwc = be.to_layout(x.to(gpu), Layout::NHWC);
      ASSERT_FALSE(mixed_codec_order(shape, Layout::NHWC, gpu, c.bucket_size).via_plain) << what;
      const MixedPacked p = quantize_mixed(x, c, kNoise);
      const MixedPacked gp = quantize_mixed(nhwc, c, kNoise);
      ASSERT_EQ(bytes_of(gp.flags), bytes_of(p.flags)) << what << ": packed flags";
      ASSERT_EQ(bytes_of(gp.meta_data), bytes_of(p.meta_data)) << what << ": metadata";
      ASSERT_EQ(bytes_of(gp.codes), bytes_of(p.codes)) << what << ": codes";

      Tensor out = Tensor::empty(shape);
      dequantize_mixed(p, out);
      Tensor gout = Tensor::empty(shape, DType::f32, Layout::NHWC, MemTag::Workspace, gpu);
      dequantize_mixed(gp, gout);
      ASSERT_TRUE(same_floats(be.to_layout(gout, Layout::Plain).to(Device::cpu()).to_vector(), out.to_vector()))
          << what << ": dequantized values";

      const Tensor gx = Tensor::empty(shape, DType::f32, Layout::Plain, MemTag::Workspace, gpu);
      dequantize_mixed_apply(gp, ActivationId::gelu, false, grad.to(gpu), gx);  // plain
      const Tensor gx_nhwc = Tensor::empty(shape, DType::f32, Layout::NHWC, MemTag::Workspace, gpu);
      dequantize_mixed_apply(gp, ActivationId::gelu, false, be.to_layout(grad.to(gpu), Layout::NHWC), gx_nhwc);
      ASSERT_TRUE(same_floats(be.to_layout(gx_nhwc, Layout::Plain).to(Device::cpu()).to_vector(),
                              gx.to(Device::cpu()).to_vector()))
          << what << ": GELU's backward from the codes";
    }
}

}  // namespace
}  // namespace packrat
