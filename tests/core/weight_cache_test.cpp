// The CPU weight cache's own rules, on any ISA: a parameter's reordered copy is reused until
// its version changes, kept only when the caller says the weight will be reused, never kept for
// a non-parameter, freed with the weight. (Conv2dOp.WeightCacheReordersOncePerVersion
// checks the same through conv2d where the kernel wants blocked weights, i.e. on AVX-512.)
#include "core/cpu/weight_cache.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/allocator.h"
#include "core/cpu/dnnl_context.h"
#include "tests/support/gradcheck.h"

namespace packrat {
namespace {

using tag = dnnl::memory::format_tag;

TEST(WeightCache, ReordersOncePerVersion) {
  const dnnl::memory::dims dims{32, 16, 3, 3};
  const dnnl::memory::desc plain(dims, dnnl::memory::data_type::f32, tag::oihw);
  const dnnl::memory::desc blocked(dims, dnnl::memory::data_type::f32, tag::OIhw8i8o);
  cpu::clear_weight_cache();
  Tensor w = Tensor::empty({32, 16, 3, 3}, DType::f32, Layout::Plain, MemTag::Parameter);  // a model parameter
  std::ranges::copy(testing::random_tensor({32, 16, 3, 3}, 2).span<float>(), w.span<float>().begin());

  const int64_t r0 = cpu::weight_cache_reorders();
  EXPECT_EQ(cpu::weights_as(w, plain, plain, true).raw(), w.raw()) << "a plain kernel reads the weight in place";
  EXPECT_EQ(cpu::weight_cache_reorders(), r0);
  EXPECT_EQ(cpu::weight_cache_bytes(), 0);

  const Tensor a = cpu::weights_as(w, plain, blocked, true);
  EXPECT_EQ(cpu::weight_cache_reorders(), r0 + 1);
  EXPECT_EQ(cpu::weight_cache_bytes(), static_cast<int64_t>(blocked.get_size()));
  EXPECT_EQ(cpu::weights_as(w, plain, blocked, true).raw(), a.raw()) << "an unchanged weight comes from the cache";
  EXPECT_EQ(cpu::weight_cache_reorders(), r0 + 1);
  // OIhw8i8o: element (o, i, h, w) at ((o/8 * 2 + i/8) * 9 + h*3 + w) * 64 + (i%8) * 8 + o%8.
  EXPECT_EQ(a.data<float>()[((1 * 2 + 1) * 9 + 4) * 64 + 3 * 8 + 5], w.data<float>()[((13 * 16 + 11) * 3 + 1) * 3 + 1]);

  // An in-place update bumps the version: reordered again, from the new values.
  for (float& v : w.span<float>()) v *= 2.0f;
  w.bump_version();
  const Tensor b = cpu::weights_as(w, plain, blocked, true);
  EXPECT_EQ(cpu::weight_cache_reorders(), r0 + 2);
  EXPECT_EQ(b.data<float>()[7], 2.0f * a.data<float>()[7]);
  // Not to be kept (training): reordered, and the stale copy is freed.
  w.bump_version();
  cpu::weights_as(w, plain, blocked, false);
  EXPECT_EQ(cpu::weight_cache_reorders(), r0 + 3);
  EXPECT_EQ(cpu::weight_cache_bytes(), 0);
  // A tensor that is not a parameter is never kept.
  const Tensor other = testing::random_tensor({32, 16, 3, 3}, 3);
  cpu::weights_as(other, plain, blocked, true);
  cpu::weights_as(other, plain, blocked, true);
  EXPECT_EQ(cpu::weight_cache_reorders(), r0 + 5);
  EXPECT_EQ(cpu::weight_cache_bytes(), 0);
  // Kept again, then the weight is freed: its copy is freed with it, in the allocator too (not
  // when the next convolution looks it up: a model freed after its evaluation would leave the
  // copies in the next run's Workspace figures).
  const int64_t workspace = Allocator::cpu().current(MemTag::Workspace);
  cpu::weights_as(w, plain, blocked, true);
  EXPECT_GT(cpu::weight_cache_bytes(), 0);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Workspace), workspace + static_cast<int64_t>(blocked.get_size()));
  w = Tensor();
  EXPECT_EQ(cpu::weight_cache_bytes(), 0);
  EXPECT_EQ(Allocator::cpu().current(MemTag::Workspace), workspace);
  // clear_weight_cache frees the copies of live weights.
  Tensor v = Tensor::empty({32, 16, 3, 3}, DType::f32, Layout::Plain, MemTag::Parameter);
  cpu::weights_as(v, plain, blocked, true);
  EXPECT_GT(Allocator::cpu().current(MemTag::Workspace), workspace);
  cpu::clear_weight_cache();
  EXPECT_EQ(Allocator::cpu().current(MemTag::Workspace), workspace);
  EXPECT_EQ(cpu::weight_cache_bytes(), 0);
}

// An f32 weight a 16-bit kernel wants blocked is converted by packrat's rounding (Tensor::to: round to
// nearest even, denormals kept) and then reordered: the copy holds exactly the weight's bf16 values.
TEST(WeightCache, AnF32WeightWanted16BitBlockedHoldsItsBf16Values) {
  const dnnl::memory::dims dims{48, 32, 1, 1};
  const dnnl::memory::desc plain(dims, dnnl::memory::data_type::f32, tag::oihw);
  const dnnl::memory::desc blocked(dims, dnnl::memory::data_type::bf16, tag::ABcd16a16b2a);
  const dnnl::memory::desc plain16(dims, dnnl::memory::data_type::bf16, tag::oihw);
  Tensor w = testing::random_tensor({48, 32, 1, 1}, 4);
  float* v = w.data<float>();
  v[0] = 1.0f + 0x1p-8f;               // a tie: rounds to even (1.0)
  v[1] = 1.0f + 0x1p-8f + 0x1p-20f;    // above the tie: rounds up
  v[2] = 1e-40f;                       // a denormal: kept
  v[3] = -3.0e38f;
  const int workspace = static_cast<int>(Allocator::cpu().current(MemTag::Workspace));
  const Tensor copy = cpu::weights_as(w, plain, blocked, false);
  // Back to plain bf16 (a 16-bit to 16-bit reorder moves bits): the weight's bf16 rounding, bit for bit.
  Tensor back = Tensor::empty({48, 32, 1, 1}, DType::bf16);
  cpu::reorder(dnnl::memory(blocked, cpu::dnnl_engine(), const_cast<void*>(copy.raw())), cpu::memory_of(back, plain16));
  const Tensor want = w.to(DType::bf16);
  const auto* got_bits = static_cast<const uint16_t*>(back.raw());
  const auto* want_bits = static_cast<const uint16_t*>(want.raw());
  // The denormal survives the 16-bit to 16-bit reorder where oneDNN's moves bits: its jit reorder, on
  // a CPU with 16-bit kernels (the only kind whose kernels read this copy; the AMX Xeon). A CPU without
  // them gets its reference reorder (`simple:any`), which converts through f32 and flushes the
  // denormal to zero (the AVX2 EPYC, oneDNN 2.6).
  const bool moves_bits = cpu::bf16_kernels();
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (i != 2 || moves_bits) {
      ASSERT_EQ(got_bits[i], want_bits[i]) << "weight " << i << ": " << v[i];
    }
  }
  EXPECT_EQ(want_bits[0], 0x3F80);
  EXPECT_EQ(want_bits[1], 0x3F81);
  EXPECT_NE(want_bits[2], 0) << "the denormal is not flushed by packrat's rounding";
  EXPECT_EQ(static_cast<int>(Allocator::cpu().current(MemTag::Workspace)),
            workspace + static_cast<int>(copy.nbytes()))
      << "the 16-bit plain copy is freed; only the blocked one lives";
}

}  // namespace
}  // namespace packrat
