// The decode of an NHWC tensor's per-group codes straight into NHWC (quant/group/nhwc_decode.h), on the
// host: a CUDA block's phases (its codes and metadata copied, then its run decoded a thread at a
// time) give the plain tensor's dequantized values, and an activation's backward from the codes,
// in NHWC order; a run's decode writes its own elements and nothing else. On a GPU,
// StoreCuda.GroupsOfAnNhwcTensorAreThePlainTensors runs the kernel.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/pointwise_math.h"
#include "quant/group/group_quant.h"
#include "quant/group/nhwc_decode.h"
#include "tests/quant/nhwc_cases.h"

namespace packrat {
namespace {

using namespace nhwc_cases;
using Gelu = ApplyDerivative<Activation<ActivationId::gelu>, false>;

// The plain tensor's codes, and what the CPU makes of them: values and GELU's backward.
struct Decoded {
  std::vector<uint8_t> codes, meta;
  std::vector<float> values, gx;
};
Decoded decode_on_cpu(const std::vector<float>& plain, const std::vector<float>& grad, const GroupGeometry& g) {
  Decoded d;
  d.codes.resize(static_cast<size_t>(g.code_bytes()));
  d.meta.resize(static_cast<size_t>(g.meta_bytes()));
  quantize_groups(plain.data(), g, Rounding::Stochastic, kNoise, d.codes.data(), d.meta.data());
  d.values.resize(plain.size());
  d.gx.resize(plain.size());
  dequantize_groups(d.codes.data(), d.meta.data(), g, d.values.data());
  const DequantizeQuadsBody<Gelu> apply{d.codes.data(), d.meta.data(), g, Gelu{grad.data(), d.gx.data()}};
  for (int64_t group = 0; group < g.groups(); ++group) apply(group, 0, 1);
  return d;
}

// Every block of the kernel, its phases thread by thread, into sink's NHWC buffers.
// quads: 4 pixels x 4 channels a thread (nhwc_decode_run_quads), else element by element.
template <class Sink>
void decode_blocks_on_host(const Decoded& d, const GroupGeometry& g, const CodecWalk& walk, const Sink& sink,
                           bool expect_fit, bool quads = false) {
  const NhwcElementDecoder decode = nhwc_element_decoder(d.codes.data(), d.meta.data(), g);
  const int64_t per_block = nhwc_decode_block_groups(g);
  for (int64_t block = 0; block * per_block < g.groups(); ++block) {
    const NhwcBlock b = nhwc_block(g, per_block, block);
    const NhwcBlockBytes bytes = nhwc_block_bytes(g, b);
    ASSERT_EQ(bytes.fits, expect_fit) << "block " << block;
    ASSERT_LE(b.run.end - b.run.begin, std::max<int64_t>(kNhwcDecodeValues, g.group_size));
    std::vector<uint8_t> codes_copy(kNhwcCodeBytes, 0xEE), meta_copy(kNhwcMetaBytes, 0xEE);
    NhwcElementDecoder here = decode;
    for (int t = 0; t < kNhwcBlockThreads; ++t)
      here = nhwc_copy_block_bytes(decode, bytes, codes_copy.data(), meta_copy.data(), t, kNhwcBlockThreads);
    for (int t = 0; t < kNhwcBlockThreads; ++t) {
      if (quads)
        nhwc_decode_run_quads(walk, b.run, here, sink, t, kNhwcBlockThreads);
      else
        nhwc_decode_run(walk, b.run, here, sink, t, kNhwcBlockThreads);
    }
  }
}

TEST(NhwcDecode, BlocksDecodeToThePlainTensorsFloatsInNhwc) {
  for (const Case& k : kCases)
    for (int bits : {2, 3}) {
      const int64_t p = k.h * k.w, numel = k.n * k.c * p;
      const std::vector<float> plain = random_values(numel, static_cast<uint64_t>(numel + bits));
      const std::vector<float> grad = random_values(numel, 7), grad_nhwc = to_nhwc(grad, k.n, k.c, p);
      const GroupGeometry g = geometry_of(k, bits);
      const Decoded d = decode_on_cpu(plain, grad, g);
      const CodecWalk walk{k.c, p, true};
      const std::vector<float> want_values = to_nhwc(d.values, k.n, k.c, p), want_gx = to_nhwc(d.gx, k.n, k.c, p);
      for (const bool quads : {false, true}) {
        if (quads && !nhwc_quad_decodable(g, walk)) continue;
        std::vector<float> values(static_cast<size_t>(numel), -99.0f), gx(static_cast<size_t>(numel), -99.0f);
        decode_blocks_on_host(d, g, walk, StoreValues{values.data()}, true, quads);
        decode_blocks_on_host(d, g, walk, Gelu{grad_nhwc.data(), gx.data()}, true, quads);
        const std::string what = k.name() + ", " + std::to_string(bits) + " bits" + (quads ? ", quads" : "");
        EXPECT_EQ(std::memcmp(values.data(), want_values.data(), want_values.size() * 4), 0) << what << ": values";
        EXPECT_EQ(std::memcmp(gx.data(), want_gx.data(), want_gx.size() * 4), 0) << what << ": backward";
      }
    }
}

// The quads' walk is taken where a pixel's channels, a channel's pixels and the groups come in
// fours, and not otherwise.
TEST(NhwcDecode, QuadsAreTakenWhereChannelsPixelsAndGroupsComeInFours) {
  int decodable = 0;
  for (const Case& k : kCases) {
    const GroupGeometry g = geometry_of(k, 2);
    const CodecWalk walk{k.c, k.h * k.w, true};
    const bool fours = k.c % 4 == 0 && k.h * k.w % 4 == 0 && k.group_size % 4 == 0;
    EXPECT_EQ(nhwc_quad_decodable(g, walk), fours) << k.name();
    decodable += fours;
  }
  EXPECT_GE(decodable, 4);  // the blocks' test above runs the quads on these
  EXPECT_FALSE(nhwc_quad_decodable(geometry_of(Case{2, 8, 4, 4, 18, Grouping::PerSample}, 2), CodecWalk{8, 16, true}))
      << "groups of 18: a quad of a channel's pixels may straddle two groups";
}

// A quad of a group's elements is its four values, at every width.
TEST(NhwcDecode, AQuadIsItsFourValues) {
  const Case k{2, 8, 8, 8, 64, Grouping::PerSample};
  const int64_t numel = k.n * k.c * k.h * k.w;
  const std::vector<float> plain = random_values(numel, 11), grad = random_values(numel, 12);
  for (int bits : {1, 2, 3, 4, 8}) {
    const GroupGeometry g = geometry_of(k, bits);
    const Decoded d = decode_on_cpu(plain, grad, g);
    const NhwcElementDecoder decode = nhwc_element_decoder(d.codes.data(), d.meta.data(), g);
    for (uint32_t x = 0; x < numel; x += 4) {
      float v[4];
      decode.quad(x, v);
      for (uint32_t r = 0; r < 4; ++r) ASSERT_EQ(v[r], d.values[x + r]) << bits << " bits, element " << x + r;
    }
  }
}

// A group larger than a block's shared copy: decoded from the codes in global memory.
TEST(NhwcDecode, AGroupOverTheSharedCopyIsDecodedFromGlobalMemory) {
  const Case k{2, 32, 32, 32, 16384, Grouping::PerSample};  // 8-bit groups of 16 KiB
  const int64_t p = k.h * k.w, numel = k.n * k.c * p;
  const std::vector<float> plain = random_values(numel, 5), grad = random_values(numel, 6);
  const GroupGeometry g = geometry_of(k, 8);
  ASSERT_EQ(nhwc_decode_block_groups(g), 1);
  const Decoded d = decode_on_cpu(plain, grad, g);
  std::vector<float> values(static_cast<size_t>(numel), -99.0f);
  decode_blocks_on_host(d, g, CodecWalk{k.c, p, true}, StoreValues{values.data()}, false);
  EXPECT_EQ(values, to_nhwc(d.values, k.n, k.c, p));
}

// The runs of an (n, c, p) tensor in groups of 16 decoded by 1, 37 and 256 threads (quads: 4 x 4
// tiles, nhwc_decode_run_quads; else nhwc_decode_run), with the values' sink and with a backward in
// place (gx the gradient's buffer): what lies outside a run keeps its bytes.
void expect_runs_decoded_where_they_lie(int64_t c, int64_t h, int64_t w, bool quads,
                                        const std::vector<ElementRun>& runs) {
  const int64_t n = 3, p = h * w, numel = n * c * p;
  const Case k{n, c, h, w, 16, Grouping::PerSample};
  const std::vector<float> plain = random_values(numel, 1), grad = random_values(numel, 2);
  const GroupGeometry g = geometry_of(k, 2);
  const Decoded d = decode_on_cpu(plain, grad, g);
  const NhwcElementDecoder decode = nhwc_element_decoder(d.codes.data(), d.meta.data(), g);
  const CodecWalk walk{c, p, true};
  ASSERT_EQ(nhwc_quad_decodable(g, walk), quads);
  auto decode_run = [&](const ElementRun& run, const auto& sink, int t, int threads) {
    if (quads)
      nhwc_decode_run_quads(walk, run, decode, sink, t, threads);
    else
      nhwc_decode_run(walk, run, decode, sink, t, threads);
  };
  for (const ElementRun& run : runs)
    for (int threads : {1, 37, 256}) {
      const std::string what = fmt::format("{} channels, run [{}, {}), {} threads", c, run.begin, run.end, threads);
      std::vector<float> values(static_cast<size_t>(numel), -99.0f), in_place = to_nhwc(grad, n, c, p);
      for (int t = 0; t < threads; ++t) decode_run(run, StoreValues{values.data()}, t, threads);
      for (int t = 0; t < threads; ++t) decode_run(run, Gelu{in_place.data(), in_place.data()}, t, threads);
      std::vector<float> want_values(static_cast<size_t>(numel), -99.0f), want_in_place = grad;
      for (int64_t e = run.begin; e < run.end; ++e) {
        want_values[static_cast<size_t>(e)] = d.values[static_cast<size_t>(e)];
        want_in_place[static_cast<size_t>(e)] = d.gx[static_cast<size_t>(e)];
      }
      ASSERT_EQ(values, to_nhwc(want_values, n, c, p)) << what;
      ASSERT_EQ(in_place, to_nhwc(want_in_place, n, c, p)) << what;
    }
}

// Planes of 63: 5 channels one element at a time (for_nhwc_run); 8, 12 and 16 quads of channels
// (for_nhwc_vectors, channels innermost). Runs cut at any element.
TEST(NhwcDecode, ARunIsDecodedWhereItLiesAndNothingElse) {
  for (const int64_t c : {5, 8, 12, 16}) {
    const int64_t p = 7 * 9;
    expect_runs_decoded_where_they_lie(c, 7, 9, false,
                                       {{10, 40}, {p - 3, 3 * p + 5}, {2 * c * p - 7, 2 * c * p + 70},
                                        {0, 3 * c * p}, {p, 2 * p}, {5 * p + 2, 7 * p - 1}});
  }
}

// The same for the 4 x 4 tiles: planes of 48, runs cut at multiples of 4, as groups of a multiple
// of 4 cut them.
TEST(NhwcDecode, AQuadRunIsDecodedWhereItLiesAndNothingElse) {
  for (const int64_t c : {4, 8, 12, 16}) {
    const int64_t p = 8 * 6;
    expect_runs_decoded_where_they_lie(c, 8, 6, true,
                                       {{12, 40}, {p - 4, 3 * p + 8}, {2 * c * p - 8, 2 * c * p + 72},
                                        {0, 3 * c * p}, {p, 2 * p}, {5 * p + 4, 7 * p - 4}});
  }
}

}  // namespace
}  // namespace packrat
