#pragma once
// The mixed / deterministic bucket quantizer configurations the codec tests sweep (the CPU
// reference kernels in codec_bitexact_test.cpp, the CUDA kernel bodies in
// mixed_quant_device_test.cpp): both roundings and metadata types, buckets of 64, 100, 512 and
// 1000 (tails for any size; 1000 is more than the CUDA kernel keeps in registers), affine widths
// (the per-group ones, others, wide codes, per tensor, one width) and sign-magnitude ones under
// both scales (2/4 bits, ternary / 1000 levels, per tensor, one width).
#include <cstdint>
#include <string>
#include <vector>

#include "quant/mixed/mixed_quant.h"

namespace packrat::testing {

struct MixedCase {
  std::string name;  // for failure messages
  MixedQuantConfig c;
};

inline std::vector<MixedCase> mixed_cases() {
  std::vector<MixedCase> out;
  auto add = [&](ScaleRule rule, BucketWidth base, BucketWidth mix, double p, MixDecision d, Rounding r, MetaType m,
                 int64_t bucket) {
    MixedQuantConfig c;
    c.scale = rule;
    c.base = base;
    c.mix = mix;
    c.mix_prob = p;
    c.decision = d;
    c.rounding = r;
    c.meta = m;
    c.bucket_size = bucket;
    out.push_back({std::string(scale_rule_name(rule)) + " " + std::to_string(base.code_bits) + "/" +
                       std::to_string(mix.code_bits) + "-bit codes @" + std::to_string(p) + " " +
                       std::string(mix_decision_name(d)) + " " + std::string(rounding_name(r)) + " " +
                       std::string(meta_name(m)) + " bucket " + std::to_string(bucket),
                   c});
  };
  for (Rounding r : {Rounding::Stochastic, Rounding::Nearest})
    for (MetaType m : {MetaType::BF16, MetaType::F32})
      for (int64_t bucket : {int64_t{64}, int64_t{100}, int64_t{512}, int64_t{1000}}) {
        add(ScaleRule::Affine, affine_width(2), affine_width(4), 0.5, MixDecision::PerBucket, r, m, bucket);
        add(ScaleRule::Affine, affine_width(1), affine_width(8), 0.3, MixDecision::PerBucket, r, m, bucket);
        add(ScaleRule::Affine, affine_width(3), affine_width(6), 0.4, MixDecision::PerBucket, r, m, bucket);
        add(ScaleRule::Affine, affine_width(4), affine_width(12), 0.5, MixDecision::PerTensor, r, m, bucket);
        add(ScaleRule::Affine, affine_width(5), affine_width(5), 0.0, MixDecision::PerBucket, r, m, bucket);
        for (ScaleRule rule : {ScaleRule::MaxAbs, ScaleRule::L2}) {
          add(rule, width_for_bits(rule, 2), width_for_bits(rule, 4), 0.5, MixDecision::PerBucket, r, m, bucket);
          add(rule, sign_magnitude_width(1), sign_magnitude_width(1000), 0.5, MixDecision::PerBucket, r, m, bucket);
          add(rule, width_for_bits(rule, 2), width_for_bits(rule, 4), 0.6, MixDecision::PerTensor, r, m, bucket);
          add(rule, width_for_bits(rule, 3), width_for_bits(rule, 3), 0.0, MixDecision::PerBucket, r, m, bucket);
          add(rule, width_for_bits(rule, 3), width_for_bits(rule, 3), 0.0, MixDecision::PerTensor, r, m, bucket);
        }
      }
  return out;
}

}  // namespace packrat::testing
