// The mixed / deterministic bucket codes of a GPU's NHWC tensor in plain order
// (quant/mixed/nhwc_buckets.h), on the host: the phases a CUDA quantize block runs (stage its buckets'
// run into a tile, quantize each bucket there) write the CPU kernel's bytes for the plain tensor,
// and the phases of a decode block (copy its buckets' codes and metadata, decode its run) give
// the plain tensor's floats, and an activation's backward from the codes, in NHWC. On a GPU,
// StoreCuda.BucketsOfAnNhwcTensorAreThoseOfTheCpuBlockedTensor runs the kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/pointwise_math.h"
#include "core/tensor.h"
#include "quant/mixed/mixed_quant.h"
#include "quant/mixed/nhwc_buckets.h"
#include "tests/quant/nhwc_cases.h"
#include "tests/support/mixed_cases.h"

namespace packrat {
namespace {

using nhwc_cases::random_values;
using nhwc_cases::to_nhwc;
using Gelu = ApplyDerivative<Activation<ActivationId::gelu>, false>;

const QuantNoise kNoise{0xB0C7ull, quant_stream(6, 3)};

// (N, C, H, W): pixels of 8 channels at planes of 1024 and of 1023, quads of 4 channels, single
// channels (5), small planes of 9; none a multiple of a bucket.
struct Shape4 {
  int64_t n, c, h, w;
  int64_t plane() const { return h * w; }
  int64_t numel() const { return n * c * h * w; }
  std::string name() const { return fmt::format("({}, {}, {}, {})", n, c, h, w); }
};
const Shape4 kShapes[] = {{2, 8, 32, 32}, {1, 16, 31, 33}, {3, 12, 8, 8}, {2, 5, 7, 9}, {2, 32, 3, 3}};

// The stochastic cases of the codec tests (both metadata types, buckets of 64 to 1000, every rule
// and width; nearest rounding takes the same walk).
std::vector<testing::MixedCase> cases() {
  std::vector<testing::MixedCase> out;
  for (const testing::MixedCase& k : testing::mixed_cases())
    if (k.c.rounding == Rounding::Stochastic) out.push_back(k);
  return out;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  if (!t.defined()) return {};
  return std::vector<uint8_t>(t.data<uint8_t>(), t.data<uint8_t>() + t.numel());
}

// What the kernels read of a quantized tensor: its format, held flags and code offsets.
struct Held {
  MixedFormat f;
  std::vector<uint8_t> flags;    // the packed flags held (empty: uniform)
  bool uniform_is_mix = false;   // uniform: every bucket took the mix width
  std::vector<int64_t> offsets;  // (buckets + 1,) the scan of the bucket code bytes
  BucketFlags bucket_flags() const { return {flags.empty() ? nullptr : flags.data(), true, uniform_is_mix}; }
  BucketOffsets bucket_offsets() const { return {offsets.data(), 0}; }
};
Held held_of(const MixedPacked& p) {
  Held h;
  h.f = MixedFormat{p.geometry(), p.base, p.mix, p.scale, p.meta};
  h.flags = bytes_of(p.flags);
  h.uniform_is_mix = p.uniform_is_mix;
  h.offsets = bucket_code_offsets(h.f.g, h.f.base, h.f.mix, h.bucket_flags());
  return h;
}

TEST(NhwcBuckets, AGpusNhwcTensorIsWalkedInPlainOrderWhereItsBucketsFitATile) {
  const Device gpu = Device::cuda(0);  // a device label only: the plan needs no GPU
  const CodecOrder staged = mixed_codec_order({2, 8, 32, 32}, Layout::NHWC, gpu, 512);
  EXPECT_TRUE(staged.walk.nhwc);
  EXPECT_EQ(staged.walk.channels, 8);
  EXPECT_EQ(staged.walk.plane, 1024);
  EXPECT_FALSE(staged.via_plain);
  EXPECT_TRUE(mixed_codec_order({2, 8, 32, 32}, Layout::NHWC, gpu, 2048).via_plain);  // over 1024 values a bucket
  EXPECT_TRUE(mixed_codec_order({2, 3, 40, 40}, Layout::NHWC, gpu, 512).via_plain);   // planes of 1600
  EXPECT_TRUE(mixed_codec_order({2, 32, 8, 8}, Layout::nChw16c, gpu, 512).via_plain);  // a CPU layout
  const CodecOrder blocked = mixed_codec_order({2, 32, 8, 8}, Layout::nChw16c, Device::cpu(), 512);
  EXPECT_FALSE(blocked.via_plain);
  EXPECT_FALSE(blocked.walk.nhwc);
  EXPECT_EQ(blocked.walk.channels, 32);
  EXPECT_EQ(blocked.walk.plane, 64);
  const CodecOrder cpu_nhwc = mixed_codec_order({2, 8, 32, 32}, Layout::NHWC, Device::cpu(), 512);
  EXPECT_FALSE(cpu_nhwc.via_plain);  // the CPU walks NHWC as one block of all 8 channels
  EXPECT_FALSE(cpu_nhwc.walk.nhwc);
  EXPECT_EQ(cpu_nhwc.walk.block, 8);
  EXPECT_EQ(cpu_nhwc.walk.channels, 8);
  const CodecOrder plain = mixed_codec_order({2, 8, 32, 32}, Layout::Plain, gpu, 2048);
  EXPECT_FALSE(plain.via_plain);
  EXPECT_EQ(plain.walk.channels, 0);
}

// A quantize block's warps read their bucket at tile + (start - run.begin) (the kernel's
// arithmetic): the one-bucket reference over it writes the CPU kernel's bytes of the plain tensor.
TEST(NhwcBuckets, StagedBlocksQuantizeToTheCpuBytesOfThePlainTensor) {
  for (const Shape4& s : kShapes)
    for (const testing::MixedCase& k : cases()) {
      const std::string what = s.name() + " " + k.name;
      const std::vector<float> plain = random_values(s.numel(), static_cast<uint64_t>(s.numel() + k.c.bucket_size));
      const std::vector<float> nhwc = to_nhwc(plain, s.n, s.c, s.plane());
      const MixedPacked p = quantize_mixed(plain.data(), s.numel(), k.c, kNoise);  // the CPU kernel
      const Held h = held_of(p);
      const CodecWalk walk{s.c, s.plane(), true};
      ASSERT_TRUE(nhwc_buckets_stageable(h.f.g, walk)) << what;
      std::vector<uint8_t> codes(static_cast<size_t>(p.codes.numel()), 0xEE);
      std::vector<uint8_t> meta(static_cast<size_t>(p.meta_data.numel()), 0xEE);
      const int64_t per_block = nhwc_quantize_block_buckets(h.f.g), meta_bytes = bucket_meta_bytes(p.scale, p.meta);
      int64_t covered = 0;
      for (int64_t block = 0; block * per_block < h.f.g.buckets; ++block) {
        const NhwcBlock b = nhwc_bucket_block(h.f.g, per_block, block);
        ASSERT_EQ(b.run.begin, covered) << what << " block " << block;
        ASSERT_LE(b.run.end - b.run.begin, kNhwcTileFloats) << what;
        covered = b.run.end;
        std::vector<float> tile(kNhwcTileFloats, -99.0f);
        for (int t = 0; t < kNhwcBlockThreads; ++t)
          nhwc_stage(walk, b.run, nhwc.data(), tile.data(), t, kNhwcBlockThreads);
        for (int64_t g = b.first; g < b.first + b.count; ++g) {
          const BucketWidth& w = h.bucket_flags()(g) ? p.mix : p.base;
          quantize_bucket_ref(tile.data() + (h.f.g.start(g) - b.run.begin), h.f.g.len(g), w, p.scale, k.c.rounding,
                              p.meta, QuantNoise{kNoise.seed, bucket_stream(kNoise.stream, static_cast<uint64_t>(g))},
                              meta.data() + g * meta_bytes, codes.data() + h.offsets[static_cast<size_t>(g)]);
        }
      }
      EXPECT_EQ(covered, s.numel()) << what;
      ASSERT_EQ(codes, bytes_of(p.codes)) << what << ": codes";
      ASSERT_EQ(meta, bytes_of(p.meta_data)) << what << ": metadata";
    }
}

// Every decode block, its phases thread by thread, into sink's NHWC buffers.
// quads: 4 pixels x 4 channels a thread (nhwc_decode_run_quads), else element by element.
template <class Sink>
void decode_blocks_on_host(const MixedPacked& p, const Held& h, const CodecWalk& walk, const Sink& sink,
                           bool quads = false) {
  const NhwcBucketSource src = nhwc_bucket_source(p.codes.data<uint8_t>(), p.meta_data.data<uint8_t>(), h.f,
                                                  h.bucket_flags(), h.bucket_offsets());
  const int64_t per_block = nhwc_decode_block_buckets(h.f);
  for (int64_t block = 0; block * per_block < h.f.g.buckets; ++block) {
    const NhwcBlock b = nhwc_bucket_block(h.f.g, per_block, block);
    ASSERT_LE(b.run.end - b.run.begin, kNhwcDecodeValues);
    ASSERT_LE(b.count, kNhwcBucketTable);
    ASSERT_LE(h.offsets[static_cast<size_t>(b.first + b.count)] - h.offsets[static_cast<size_t>(b.first)] / 16 * 16,
              kNhwcCodeBytes);
    std::vector<uint8_t> codes_copy(kNhwcCodeBytes, 0xEE);
    const NhwcBucketEntry poison{0xEEEE, 0xEEEE, 0xEEEE, 0xEE, 0, -99.0f, -99.0f};
    std::vector<NhwcBucketEntry> table(kNhwcBucketTable, poison);
    NhwcBucketDecoder decode{};
    for (int t = 0; t < kNhwcBlockThreads; ++t)
      decode = nhwc_bucket_block_phase(src, b, codes_copy.data(), table.data(), t, kNhwcBlockThreads);
    for (int t = 0; t < kNhwcBlockThreads; ++t) {
      if (quads)
        nhwc_decode_run_quads(walk, b.run, decode, sink, t, kNhwcBlockThreads);
      else
        nhwc_decode_run(walk, b.run, decode, sink, t, kNhwcBlockThreads);
    }
  }
}

TEST(NhwcBuckets, BlocksDecodeToThePlainTensorsFloatsInNhwc) {
  for (const Shape4& s : kShapes)
    for (const testing::MixedCase& k : cases()) {
      const std::string what = s.name() + " " + k.name;
      const int64_t numel = s.numel(), plane = s.plane();
      const std::vector<float> plain = random_values(numel, static_cast<uint64_t>(numel + 3));
      const std::vector<float> grad = random_values(numel, 7), grad_nhwc = to_nhwc(grad, s.n, s.c, plane);
      const MixedPacked p = quantize_mixed(plain.data(), numel, k.c, kNoise);
      const Held h = held_of(p);
      // What the CPU makes of the codes: the values, and GELU's backward (the device bodies' floats).
      std::vector<float> want_values(static_cast<size_t>(numel)), want_gx(static_cast<size_t>(numel));
      dequantize_mixed(p, want_values.data());
      const DequantizeBucketQuadsBody<Gelu> apply{p.codes.data<uint8_t>(), p.meta_data.data<uint8_t>(), h.f,
                                                  h.bucket_flags(), h.bucket_offsets(),
                                                  Gelu{grad.data(), want_gx.data()}};
      for (int64_t b = 0; b < h.f.g.buckets; ++b) apply(b, 0, 1);

      const CodecWalk walk{s.c, plane, true};
      const std::vector<float> nhwc_values = to_nhwc(want_values, s.n, s.c, plane);
      const std::vector<float> nhwc_gx = to_nhwc(want_gx, s.n, s.c, plane);
      for (const bool quads : {false, true}) {
        if (quads && !nhwc_buckets_quad_decodable(h.f.g, walk)) continue;
        std::vector<float> values(static_cast<size_t>(numel), -99.0f), gx(static_cast<size_t>(numel), -99.0f);
        decode_blocks_on_host(p, h, walk, StoreValues{values.data()}, quads);
        decode_blocks_on_host(p, h, walk, Gelu{grad_nhwc.data(), gx.data()}, quads);
        const std::string how = what + (quads ? ", quads" : "");
        ASSERT_EQ(std::memcmp(values.data(), nhwc_values.data(), nhwc_values.size() * 4), 0) << how << ": values";
        ASSERT_EQ(std::memcmp(gx.data(), nhwc_gx.data(), nhwc_gx.size() * 4), 0) << how << ": backward";
      }
    }
}

}  // namespace
}  // namespace packrat
