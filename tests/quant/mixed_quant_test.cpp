// Mixed-precision per-bucket quantization: format, round trip against a scalar reference,
// honest bytes, unbiasedness of both scale rules, the deterministic baseline's exact bias, the
// realised mix fraction, and configuration errors.
#include "quant/bits/wide_codes.h"
#include "quant/mixed/mixed_quant.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "quant/cpu/bucket_tiles.h"  // bucket_tiles::bucket_tiling
#include "quant/group/group_quant.h"  // nhwc_as_blocked

namespace packrat {
namespace {

std::vector<float> random_values(int64_t n, uint64_t seed, float lo = -2.0f, float hi = 3.0f) {
  PhiloxStream s(seed, 7);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * s.uniform();
  return v;
}

MixedQuantConfig config(ScaleRule rule, int base_bits, int mix_bits, double p, int64_t bucket) {
  MixedQuantConfig c;
  c.scale = rule;
  c.base = width_for_bits(rule, base_bits);
  c.mix = width_for_bits(rule, mix_bits);
  c.mix_prob = p;
  c.bucket_size = bucket;
  return c;
}

std::vector<float> dequantized(const MixedPacked& p) {
  std::vector<float> out(static_cast<size_t>(p.numel));
  dequantize_mixed(p, out.data());
  return out;
}

std::vector<uint8_t> flags_of(const BucketGeometry& g, const MixedQuantConfig& c, const QuantNoise& noise) {
  std::vector<uint8_t> f(static_cast<size_t>(g.buckets));
  decide_buckets(g, c, noise, f.data());
  return f;
}

// The scalar reference: per element with the per-element helpers, the metadata read back from
// the packed tensor (checked against the bucket's own statistics), the noise from rounding_uniform
// on each bucket's stream.
std::vector<float> reference(const std::vector<float>& x, const MixedQuantConfig& c, const QuantNoise& noise,
                             const MixedPacked& p) {
  const BucketGeometry g = bucket_geometry(static_cast<int64_t>(x.size()), c.bucket_size);
  const std::vector<uint8_t> flags = flags_of(g, c, noise);
  const int mb = bucket_meta_bytes(c.scale, c.meta);
  std::vector<float> out(x.size());
  for (int64_t b = 0; b < g.buckets; ++b) {
    const BucketWidth& w = flags[static_cast<size_t>(b)] ? c.mix : c.base;
    const uint8_t* meta = p.meta_data.data<uint8_t>() + b * mb;
    const float* xb = x.data() + g.start(b);
    const int64_t len = g.len(b);
    if (c.scale == ScaleRule::Affine) {
      float mn = xb[0], mx = xb[0];
      for (int64_t i = 0; i < len; ++i) mn = std::min(mn, xb[i]), mx = std::max(mx, xb[i]);
      const GroupParams want = group_params(mn, mx, w.bits, c.meta);
      const GroupParams held = load_group_meta(meta, c.meta);
      EXPECT_EQ(held.min, want.min) << "bucket " << b;
      EXPECT_EQ(held.step, want.step) << "bucket " << b;
      for (int64_t i = 0; i < len; ++i) {
        const uint64_t e = static_cast<uint64_t>(g.start(b) + i);
        const uint64_t stream = bucket_stream(noise.stream, static_cast<uint64_t>(b));
        const float r = c.rounding == Rounding::Stochastic ? rounding_uniform(noise.seed, stream, static_cast<uint64_t>(i)) : 0.5f;
        out[static_cast<size_t>(e)] = dequantize_value(quantize_value(xb[i], held, w.levels, r), held);
      }
    } else {
      double amax = 0, sumsq = 0;
      for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(double(xb[i]))), sumsq += double(xb[i]) * xb[i];
      const double want = c.scale == ScaleRule::MaxAbs ? amax : std::sqrt(sumsq);
      float s;
      if (c.meta == MetaType::BF16) {
        uint16_t h;
        std::memcpy(&h, meta, 2);
        s = bf16_to_f32(h);
        EXPECT_GE(s, float(amax));
        EXPECT_NEAR(s, want, want * 1e-2 + 1e-30) << "bucket " << b;
      } else {
        std::memcpy(&s, meta, 4);
        EXPECT_GE(s, float(amax));
        EXPECT_NEAR(s, want, want * 1e-5 + 1e-30) << "bucket " << b;
      }
      const float los = safe_inverse(s) * static_cast<float>(w.levels), sol = s / static_cast<float>(w.levels);
      for (int64_t i = 0; i < len; ++i) {
        const uint64_t e = static_cast<uint64_t>(g.start(b) + i);
        const uint64_t stream = bucket_stream(noise.stream, static_cast<uint64_t>(b));
        const float r = c.rounding == Rounding::Stochastic ? rounding_uniform(noise.seed, stream, static_cast<uint64_t>(i)) : 0.5f;
        out[static_cast<size_t>(e)] =
            dequantize_sign_magnitude(quantize_sign_magnitude(xb[i], los, w.levels, r), sol, w.levels);
      }
    }
  }
  return out;
}

TEST(MixedQuant, SignMagnitudeCodeBitsAreHonest) {
  EXPECT_EQ(sign_magnitude_code_bits(1), 2);  // -1, 0, 1
  EXPECT_EQ(sign_magnitude_code_bits(3), 3);  // 7 codes
  EXPECT_EQ(sign_magnitude_code_bits(4), 4);  // the thesis's 2 bits: 9 codes
  EXPECT_EQ(sign_magnitude_code_bits(16), 6);
  EXPECT_EQ(sign_magnitude_code_bits(256), 10);
  EXPECT_EQ(width_for_bits(ScaleRule::MaxAbs, 2).code_bits, 4);
  EXPECT_EQ(width_for_bits(ScaleRule::MaxAbs, 2).bits, 2);
  EXPECT_EQ(width_for_bits(ScaleRule::Affine, 2).code_bits, 2);
  EXPECT_EQ(width_for_bits(ScaleRule::Affine, 16).levels, 65535u);
  EXPECT_EQ(bucket_meta_bytes(ScaleRule::Affine, MetaType::BF16), 4);
  EXPECT_EQ(bucket_meta_bytes(ScaleRule::L2, MetaType::F32), 4);
}

TEST(MixedQuant, NoiseIsPerGroupQuantizationsNoise) {
  const QuantNoise noise{11, quant_stream(5, 3)};
  for (int64_t e0 : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{127}, int64_t{128}, int64_t{250}, int64_t{1000}, (int64_t{1} << 36) - 3}) {
    for (int64_t n : {1, 5, 8, 9, 255, 256, 257, 700}) {
      std::vector<uint16_t> r(static_cast<size_t>(n));
      RoundingNoise(noise).fill(e0, n, r.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(r[static_cast<size_t>(i)], rounding_noise16(noise.seed, noise.stream, static_cast<uint64_t>(e0 + i)))
            << "e0 " << e0 << " n " << n << " i " << i;
    }
  }
}

// The codes follow the tensor's logical order: a blocked tensor (nChw16c or nChw8c, the CPU
// convolutions' layouts) is walked in plain order, so its codes, metadata and flags are its plain
// copy's byte for byte, and it decodes into its layout to the plain copy's values. Planes of 63
// (tiles of 1008 or 504 plain elements): buckets within a tile, across two, and longer than a
// tile; affine and max-abs rules.
TEST(MixedQuant, ABlockedTensorIsQuantizedInItsLogicalOrder) {
  const std::vector<float> v = random_values(2 * 32 * 63, 14);
  Tensor plain = Tensor::empty(Shape{2, 32, 9, 7});
  std::memcpy(plain.data<float>(), v.data(), v.size() * sizeof(float));
  auto bytes = [](const Tensor& t) {
    if (!t.defined()) return std::vector<uint8_t>{};
    return std::vector<uint8_t>(t.data<uint8_t>(), t.data<uint8_t>() + t.nbytes());
  };
  // NHWC (channels-last activations on the CPU): walked as one block of all 32 channels.
  for (Layout layout : {Layout::nChw16c, Layout::nChw8c, Layout::NHWC}) {
    const Tensor blocked = plain.to_layout(layout);
    for (ScaleRule rule : {ScaleRule::Affine, ScaleRule::MaxAbs})
      for (int64_t bucket : {100, 512, 2048}) {
        SCOPED_TRACE(fmt::format("{}, buckets of {}", layout_name(layout), bucket));
        const MixedQuantConfig c = config(rule, 2, 4, 0.5, bucket);
        const QuantNoise noise{3, 9};
        const MixedPacked from_plain = quantize_mixed(plain, c, noise);
        const MixedPacked from_blocked = quantize_mixed(blocked, c, noise);
        EXPECT_EQ(bytes(from_blocked.codes), bytes(from_plain.codes));
        EXPECT_EQ(bytes(from_blocked.meta_data), bytes(from_plain.meta_data));
        EXPECT_EQ(bytes(from_blocked.flags), bytes(from_plain.flags));
        Tensor out = Tensor::empty(plain.shape(), DType::f32, layout);
        dequantize_mixed(from_blocked, out);
        EXPECT_EQ(out.to_plain().to_vector(), dequantized(from_plain));
      }
  }
}

// Buckets of whole channel planes of a blocked buffer at one width and the max-abs rule are
// quantized where they lie (quant/cpu/bucket_tiles.h: k lanes of a tile, or k whole tiles): the
// same codes and metadata as the plain tensor's, and its values back in the blocked layout, from
// f32 and bf16, stochastic and nearest, bf16 and f32 metadata, with NaN, infinities and zeros of
// both signs among the values. Other rules and mixed widths take the plain walk.
TEST(MixedQuant, BlockedBucketsOfWholePlanesAreThePlainTensorsBytes) {
  auto bytes = [](const Tensor& t) {
    if (!t.defined()) return std::vector<uint8_t>{};
    return std::vector<uint8_t>(t.data<uint8_t>(), t.data<uint8_t>() + t.nbytes());
  };
  auto value_bits = [](const Tensor& t) {  // the values' bit patterns, NaN included
    const std::vector<float> v = t.to_plain().to(DType::f32).to_vector();
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
  };
  const std::vector<Shape> shapes = {{2, 32, 4, 4}, {2, 128, 2, 2}, {2, 32, 8, 8}, {3, 32, 16, 16}, {2, 16, 32, 32}};
  int tiled = 0;
  int cases = 0;
  for (const Shape& shape : shapes)
    for (int64_t bucket : {128, 512, 1024})
      for (ScaleRule rule : {ScaleRule::MaxAbs, ScaleRule::L2})
        for (int bits : {1, 2, 4}) {
          ++cases;
          MixedQuantConfig c = config(rule, bits, bits + (cases % 5 == 0 ? 1 : 0), cases % 5 == 0 ? 0.5 : 0.0, bucket);
          c.meta = cases % 2 ? MetaType::F32 : MetaType::BF16;
          c.rounding = cases % 3 == 2 ? Rounding::Nearest : Rounding::Stochastic;
          const int64_t n = shape.numel(), plane = shape[2] * shape[3];
          std::vector<float> v = random_values(n, static_cast<uint64_t>(cases));
          for (const auto& [i, x] : {std::pair<int64_t, float>{3, NAN}, {plane + 1, INFINITY}, {5 * plane + 2, -0.0f},
                                     {7 * plane, 0.0f}, {9 * plane + 1, -INFINITY}})
            if (i < n && cases % 4 == 0) v[static_cast<size_t>(i)] = x;
          Tensor plain = Tensor::empty(shape);
          std::memcpy(plain.data<float>(), v.data(), v.size() * sizeof(float));
          const QuantNoise noise{static_cast<uint64_t>(cases), quant_stream(4, static_cast<uint64_t>(cases))};
          for (Layout layout : {Layout::nChw16c, Layout::nChw8c, Layout::NHWC})
            for (DType dtype : {DType::f32, DType::bf16}) {
              SCOPED_TRACE(fmt::format("{} {} {} {}, buckets of {}, {} bits", shape.str(), layout_name(layout),
                                       dtype_name(dtype), scale_rule_name(rule), bucket, bits));
              const Tensor x = plain.to(dtype), blocked = plain.to_layout(layout).to(dtype);
              const CodecWalk walk = layout == Layout::NHWC ? nhwc_as_blocked(shape)
                                                            : CodecWalk{shape[1], plane, false, channel_block(layout)};
              if (c.base == c.mix)
                tiled += bucket_tiles::bucket_tiling(bucket_geometry(n, bucket), walk, c.base.code_bits, rule).applies();
              const MixedPacked from_plain = quantize_mixed(x, c, noise), from_blocked = quantize_mixed(blocked, c, noise);
              ASSERT_EQ(bytes(from_blocked.codes), bytes(from_plain.codes));
              ASSERT_EQ(bytes(from_blocked.meta_data), bytes(from_plain.meta_data));
              ASSERT_EQ(bytes(from_blocked.flags), bytes(from_plain.flags));
              Tensor out = Tensor::empty(shape, dtype, layout), ref = Tensor::empty(shape, dtype);
              dequantize_mixed(from_blocked, out);
              dequantize_mixed(from_plain, ref);
              ASSERT_EQ(value_bits(out), value_bits(ref));
            }
        }
#if defined(PACKRAT_PLANE_TILES)
  EXPECT_GE(tiled, 100);  // the tile kernels took these cases: k lanes a bucket and k tiles a bucket
#endif
}

TEST(MixedQuant, WideCodesRoundTrip) {
  for (int bits = 1; bits <= kMaxCodeBits; ++bits) {
    for (int64_t n : {0, 1, 7, 8, 9, 31, 64, 77}) {
      PhiloxStream s(static_cast<uint64_t>(bits), static_cast<uint64_t>(n));
      std::vector<uint16_t> codes(static_cast<size_t>(n)), back(static_cast<size_t>(n));
      for (auto& c : codes) c = static_cast<uint16_t>(s.below(uint64_t{1} << bits));
      std::vector<uint8_t> packed(static_cast<size_t>(packed_bytes(n, bits)) + 2, 0xAB);  // 2 guard bytes
      pack_wide_codes(codes.data(), n, bits, packed.data());
      ASSERT_EQ(packed[packed.size() - 1], 0xAB);
      ASSERT_EQ(packed[packed.size() - 2], 0xAB);
      unpack_wide_codes(packed.data(), n, bits, back.data());
      ASSERT_EQ(back, codes) << bits << " bits, n = " << n;
    }
  }
}

// Every width pair, bucket size and tail: the fast kernel equals the scalar reference bit for bit.
TEST(MixedQuant, MatchesScalarReferenceForEveryWidthBucketAndTail) {
  const std::vector<std::pair<int, int>> pairs = {{1, 1}, {1, 2}, {2, 4}, {2, 6}, {3, 6}, {4, 8}, {3, 5}, {7, 7}};
  int cases = 0;
  for (ScaleRule rule : {ScaleRule::Affine, ScaleRule::MaxAbs, ScaleRule::L2}) {
    for (auto [b, m] : pairs) {
      for (int64_t bucket : {1, 5, 64, 100, 512}) {
        for (int64_t n : {int64_t{0}, int64_t{1}, bucket - 1, bucket + 3, 3 * bucket + 7, int64_t{1500}}) {
          if (n < 0) continue;
          const MetaType meta = (cases % 2) ? MetaType::F32 : MetaType::BF16;
          const Rounding rounding = (cases % 3 == 2) ? Rounding::Nearest : Rounding::Stochastic;
          ++cases;
          MixedQuantConfig c = config(rule, b, m, 0.5, bucket);
          c.meta = meta;
          c.rounding = rounding;
          const auto x = random_values(n, static_cast<uint64_t>(cases));
          const QuantNoise noise{static_cast<uint64_t>(cases), quant_stream(3, static_cast<uint64_t>(cases))};
          const MixedPacked p = quantize_mixed(x.data(), n, c, noise);
          const auto got = dequantized(p);
          const auto want = reference(x, c, noise, p);
          ASSERT_EQ(got, want) << scale_rule_name(rule) << " " << b << "/" << m << " bucket " << bucket << " n " << n
                               << " meta " << meta_name(meta) << " " << rounding_name(rounding);
        }
      }
    }
  }
}

// Values on the grid come back exactly, at every width 1 to 16 and with tails (a packing-offset
// bug could not hide here).
TEST(MixedQuant, GridValuesRoundTripExactlyAtEveryWidth) {
  for (int bits = 1; bits <= 16; ++bits) {
    for (int64_t bucket : {8, 64, 100, 512}) {
      const int64_t n = 2 * bucket + 37;
      const uint32_t levels = (1u << bits) - 1u;
      PhiloxStream s(static_cast<uint64_t>(bits), static_cast<uint64_t>(bucket));
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = i % bucket == 0 ? 0 : i % bucket == 1 ? levels : static_cast<int64_t>(s.below(levels + 1));
        x[static_cast<size_t>(i)] = -1.0f + static_cast<float>(k) * 0.125f;  // min -1, step 1/8 in every bucket
      }
      if (n % bucket == 1) x.back() = -1.0f;
      for (Rounding r : {Rounding::Stochastic, Rounding::Nearest}) {
        MixedQuantConfig c = config(ScaleRule::Affine, bits, bits, 0.0, bucket);
        c.rounding = r;
        const MixedPacked p = quantize_mixed(x.data(), n, c, QuantNoise{1, 2});
        ASSERT_EQ(dequantized(p), x) << bits << " bits, bucket " << bucket;
        ASSERT_EQ(p.codes.numel(), (n / bucket) * packed_bytes(bucket, bits) + packed_bytes(n % bucket, bits));
      }
    }
  }
  // Sign-magnitude: multiples of s / L with s = max|x| come back exactly.
  for (int bits = 1; bits <= 14; ++bits) {
    const uint32_t L = 1u << bits;
    const int64_t n = 300;
    std::vector<float> x(static_cast<size_t>(n));
    PhiloxStream s(99, static_cast<uint64_t>(bits));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = i % 100 == 0 ? L : static_cast<int64_t>(s.below(2 * L + 1)) - L;
      x[static_cast<size_t>(i)] = static_cast<float>(k) / static_cast<float>(L) * 4.0f;
    }
    MixedQuantConfig c = config(ScaleRule::MaxAbs, bits, bits, 0.0, 100);
    const MixedPacked p = quantize_mixed(x.data(), n, c, QuantNoise{1, 2});
    ASSERT_EQ(dequantized(p), x) << bits << " bits";
  }
}

TEST(MixedQuant, BytesHeldEqualTheFormulaAndTheAllocatorCount) {
  for (ScaleRule rule : {ScaleRule::Affine, ScaleRule::MaxAbs}) {
    for (MixDecision d : {MixDecision::PerBucket, MixDecision::PerTensor}) {
      for (int64_t bucket : {64, 128, 256, 512, 1000}) {
        for (double prob : {0.0, 0.3, 0.5, 1.0}) {
          const int64_t n = 10 * bucket + 13;
          MixedQuantConfig c = config(rule, 2, 4, prob, bucket);
          c.decision = d;
          const auto x = random_values(n, 5);
          const QuantNoise noise{42, quant_stream(1, static_cast<uint64_t>(bucket))};
          const int64_t before = Allocator::cpu().current(MemTag::Saved);
          TagScope tag(MemTag::Saved);
          const MixedPacked p = quantize_mixed(x.data(), n, c, noise);
          const BucketGeometry g = bucket_geometry(n, bucket);
          const auto flags = flags_of(g, c, noise);
          const int64_t formula = mixed_bytes_formula(g, c, flags);
          EXPECT_EQ(p.bytes(), formula);
          EXPECT_EQ(Allocator::cpu().current(MemTag::Saved) - before, formula);
          // By hand: codes at each bucket's bits, metadata per bucket, one flag bit per bucket when mixed.
          int64_t codes = 0, mixes = 0;
          for (int64_t b = 0; b < g.buckets; ++b) {
            const bool mix = flags[static_cast<size_t>(b)];
            mixes += mix;
            codes += (g.len(b) * (mix ? c.mix.code_bits : c.base.code_bits) + 7) / 8;
          }
          EXPECT_EQ(p.mix_buckets, mixes);
          EXPECT_EQ(p.codes.numel(), codes);
          const bool uniform = mixes == 0 || mixes == g.buckets;
          EXPECT_EQ(p.flags.defined(), !uniform);
          EXPECT_EQ(formula, codes + g.buckets * bucket_meta_bytes(rule, c.meta) + (uniform ? 0 : (g.buckets + 7) / 8));
          if (d == MixDecision::PerTensor) {
            EXPECT_TRUE(uniform);
          }
          if (prob == 0.0) {
            EXPECT_EQ(mixes, 0);
          }
          if (prob == 1.0) {
            EXPECT_EQ(mixes, g.buckets);
          }
        }
      }
    }
  }
}

TEST(MixedQuant, RealisedMixFractionMatchesMixProb) {
  for (double prob : {0.2, 0.3, 0.4, 0.5, 0.8}) {
    const MixedQuantConfig c = config(ScaleRule::Affine, 2, 4, prob, 64);
    const BucketGeometry g = bucket_geometry(64 * 50, 64);  // 50 buckets per tensor
    int64_t mix = 0, total = 0;
    for (uint64_t seed = 0; seed < 400; ++seed) {
      const auto f = flags_of(g, c, QuantNoise{seed, quant_stream(seed % 7, seed % 5)});
      for (uint8_t v : f) mix += v;
      total += g.buckets;
    }
    const double frac = static_cast<double>(mix) / static_cast<double>(total);
    const double sigma = std::sqrt(prob * (1 - prob) / static_cast<double>(total));
    EXPECT_NEAR(frac, prob, 5 * sigma) << "per-bucket p = " << prob;

    MixedQuantConfig ct = c;
    ct.decision = MixDecision::PerTensor;
    int64_t tensors_mix = 0;
    const int64_t tensors = 4000;
    for (int64_t t = 0; t < tensors; ++t) {
      const auto f = flags_of(g, ct, QuantNoise{7, quant_stream(static_cast<uint64_t>(t), 0)});
      for (uint8_t v : f) ASSERT_EQ(v, f[0]) << "a per-tensor decision takes one width for the whole tensor";
      tensors_mix += f[0];
    }
    const double tsigma = std::sqrt(prob * (1 - prob) / static_cast<double>(tensors));
    EXPECT_NEAR(static_cast<double>(tensors_mix) / tensors, prob, 5 * tsigma) << "per-tensor p = " << prob;
  }
}

// Over many draws the mean dequantized value is each element (both scale rules, mixed widths):
// every element's error mean is within 5 of its standard-error bound, and so is their sum.
TEST(MixedQuant, StochasticRoundingIsUnbiasedForBothScaleRules) {
  const int64_t n = 1024, bucket = 128;
  const int draws = 3000;
  const auto x = random_values(n, 77, -1.5f, 2.5f);
  for (ScaleRule rule : {ScaleRule::Affine, ScaleRule::MaxAbs, ScaleRule::L2}) {
    MixedQuantConfig c = config(rule, 2, 4, 0.5, bucket);
    std::vector<double> sum(static_cast<size_t>(n), 0.0);
    std::vector<double> bound_var(static_cast<size_t>(n), 0.0);  // per element: (widest step)^2 / 4 per draw
    for (int d = 0; d < draws; ++d) {
      const MixedPacked p = quantize_mixed(x.data(), n, c, QuantNoise{3, quant_stream(static_cast<uint64_t>(d), 1)});
      const auto q = dequantized(p);
      for (int64_t i = 0; i < n; ++i) sum[static_cast<size_t>(i)] += q[static_cast<size_t>(i)];
    }
    const BucketGeometry g = bucket_geometry(n, bucket);
    for (int64_t b = 0; b < g.buckets; ++b) {
      float mn = x[static_cast<size_t>(g.start(b))], mx = mn, amax = 0;
      double sq = 0;
      for (int64_t i = g.start(b); i < g.start(b) + g.len(b); ++i) {
        const float v = x[static_cast<size_t>(i)];
        mn = std::min(mn, v), mx = std::max(mx, v), amax = std::max(amax, std::fabs(v)), sq += double(v) * v;
      }
      const double step = rule == ScaleRule::Affine ? (mx - mn) / 3.0 * 1.01
                                                     : (rule == ScaleRule::L2 ? std::sqrt(sq) : amax) / 4.0 * 1.01;
      for (int64_t i = g.start(b); i < g.start(b) + g.len(b); ++i) bound_var[static_cast<size_t>(i)] = step * step / 4.0;
    }
    double total_err = 0, total_var = 0, worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double err = sum[static_cast<size_t>(i)] / draws - x[static_cast<size_t>(i)];
      const double se = std::sqrt(bound_var[static_cast<size_t>(i)] / draws);
      worst = std::max(worst, std::fabs(err) / se);
      total_err += err;
      total_var += bound_var[static_cast<size_t>(i)] / draws;
    }
    EXPECT_LT(worst, 5.0) << scale_rule_name(rule) << ": the worst element's mean error in standard errors";
    EXPECT_LT(std::fabs(total_err), 5.0 * std::sqrt(total_var)) << scale_rule_name(rule);
  }
}

// Round-to-nearest is biased exactly as expected: on a grid of step 1, 0.3 -> 0 and 0.7 -> 1,
// while stochastic rounding at the same bits is unbiased on the same input.
TEST(MixedQuant, DeterministicRoundingHasTheExpectedBias) {
  std::vector<float> x(64);  // one bucket: min 0, max 3, 2 bits -> step exactly 1
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 2 ? 0.3f : 1.7f;
  x[0] = 0.0f;
  x[1] = 3.0f;
  MixedQuantConfig c = config(ScaleRule::Affine, 2, 2, 0.0, 64);
  c.rounding = Rounding::Nearest;
  const auto q = dequantized(quantize_mixed(x.data(), 64, c, QuantNoise{}));
  double bias = 0;
  for (size_t i = 2; i < x.size(); ++i) {
    ASSERT_EQ(q[i], x[i] == 0.3f ? 0.0f : 2.0f) << i;
    bias += q[i] - x[i];
  }
  EXPECT_NEAR(bias / 62.0, (31 * -0.3 + 31 * 0.3) / 62.0, 1e-6);  // symmetric here: -0.3 and +0.3
  // One-sided: every 0.3 rounds down, a mean bias of exactly -0.3 on those elements.
  std::vector<float> y(64, 0.3f);
  y[0] = 0.0f;
  y[1] = 3.0f;
  const auto qy = dequantized(quantize_mixed(y.data(), 64, c, QuantNoise{}));
  for (size_t i = 2; i < y.size(); ++i) ASSERT_EQ(qy[i] - y[i], -0.3f);
  // Sign-magnitude, max|x| = 1, L = 4: 0.3 -> 0.25, -0.3 -> -0.25, 0.4 -> 0.5.
  MixedQuantConfig cs = config(ScaleRule::MaxAbs, 2, 2, 0.0, 64);
  cs.rounding = Rounding::Nearest;
  std::vector<float> z(64, 0.3f);
  z[0] = 1.0f;
  z[1] = -0.3f;
  z[2] = 0.4f;
  const auto qz = dequantized(quantize_mixed(z.data(), 64, cs, QuantNoise{}));
  EXPECT_EQ(qz[0], 1.0f);
  EXPECT_EQ(qz[1], -0.25f);
  EXPECT_EQ(qz[2], 0.5f);
  for (size_t i = 3; i < z.size(); ++i) ASSERT_EQ(qz[i], 0.25f);
  // Stochastic at the same 2 bits: the mean of the 0.3s over many draws is 0.3.
  MixedQuantConfig st = c;
  st.rounding = Rounding::Stochastic;
  double mean = 0;
  const int draws = 2000;
  for (int d = 0; d < draws; ++d) {
    const auto qs = dequantized(quantize_mixed(y.data(), 64, st, QuantNoise{9, quant_stream(static_cast<uint64_t>(d), 0)}));
    for (size_t i = 2; i < y.size(); ++i) mean += qs[i];
  }
  mean /= draws * 62.0;
  EXPECT_NEAR(mean, 0.3, 5 * std::sqrt(0.21 / (draws * 62.0)));
}

TEST(MixedQuant, ZeroAndConstantBucketsAreExact) {
  for (ScaleRule rule : {ScaleRule::Affine, ScaleRule::MaxAbs, ScaleRule::L2}) {
    std::vector<float> x(200, 0.0f);
    for (size_t i = 100; i < 200; ++i) x[i] = 0.75f;
    const auto q = dequantized(quantize_mixed(x.data(), 200, config(rule, 2, 4, 0.5, 100), QuantNoise{1, 1}));
    for (size_t i = 0; i < 100; ++i) ASSERT_EQ(q[i], 0.0f) << scale_rule_name(rule);
    // A constant bucket is on the grid under affine (its min) and max-abs (its scale), not under l2.
    if (rule != ScaleRule::L2) {
      for (size_t i = 100; i < 200; ++i) ASSERT_EQ(q[i], 0.75f) << scale_rule_name(rule);
    }
  }
}

TEST(MixedQuant, InvalidCombinationsAreConfigErrors) {
  auto throws_with = [](const MixedQuantConfig& c, const std::string& what) {
    try {
      c.check("saved_tensors.rules[0]");
      ADD_FAILURE() << "expected an error mentioning " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("saved_tensors.rules[0]"), std::string::npos) << e.what();
    }
  };
  throws_with(config(ScaleRule::Affine, 4, 2, 0.5, 64), "mix_bits");
  throws_with(config(ScaleRule::Affine, 2, 4, 1.5, 64), "mix_prob");
  throws_with(config(ScaleRule::Affine, 2, 4, -0.1, 64), "mix_prob");
  throws_with(config(ScaleRule::Affine, 2, 4, std::nan(""), 64), "mix_prob");
  throws_with(config(ScaleRule::Affine, 2, 4, 0.5, 0), "bucket_size");
  MixedQuantConfig wrong_rule = config(ScaleRule::Affine, 2, 4, 0.5, 64);
  wrong_rule.scale = ScaleRule::MaxAbs;  // affine widths under a sign-magnitude rule
  throws_with(wrong_rule, "scale rule");
  EXPECT_THROW(affine_width(0), Error);
  EXPECT_THROW(affine_width(17), Error);
  EXPECT_THROW(width_for_bits(ScaleRule::L2, 15), Error);  // 2^15 levels need 17-bit codes
  EXPECT_THROW(sign_magnitude_width(0), Error);
  EXPECT_THROW(bucket_geometry(10, 0), Error);
}

}  // namespace
}  // namespace packrat
