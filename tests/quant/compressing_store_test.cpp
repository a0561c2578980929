// A new scheme is its codec plus a name: the example's store that keeps bf16 values
// (examples/my_scheme/bf16_store.h) gets the entry table, dedup, the in-place check, exact
// pass-through, exact step masks, packed masks and describe() from quant/store/compressing_store.h,
// with every byte counted by the allocator.
#include "quant/store/compressing_store.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/pointwise.h"
#include "core/allocator.h"
#include "core/philox.h"
#include "examples/my_scheme/bf16_store.h"
#include "quant/group/group_quant.h"  // f32_to_bf16, bf16_to_f32
#include "tests/support/errors.h"

namespace packrat {
namespace {

using my_scheme::Bf16Store;  // the bf16 scheme of examples/my_scheme: encode() and values() only

int64_t saved_bytes() { return Allocator::cpu().current(MemTag::Saved); }

Tensor random_tensor(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::empty(s);
  PhiloxStream r(seed, 3);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 4.0f * r.uniform() - 2.0f;
  return t;
}

TEST(CompressingStore, ANewSchemeIsItsCodecPlusAName) {
  Bf16Store store;
  const int64_t before = saved_bytes();
  const Tensor x = random_tensor(Shape{4, 25}, 1);
  const SavedHandle v1 = store.save(x, SaveRequest{Need::Value, nullptr, "conv2d", "conv1"});
  EXPECT_EQ(saved_bytes() - before, 200) << "2 bytes per element";
  const SavedHandle v2 = store.save(x.reshape(Shape{100}), SaveRequest{Need::Value, nullptr, "linear", "fc"});
  EXPECT_EQ(saved_bytes() - before, 200) << "a buffer saved twice is encoded once";
  std::vector<float> want = x.to_vector();
  for (float& w : want) w = bf16_to_f32(f32_to_bf16(w));
  EXPECT_EQ(store.load(v1).to_vector(), want);
  EXPECT_EQ(store.load(v2).shape(), Shape({100}));

  const Pointwise& relu = pointwise_by_name("relu");
  const SavedHandle d = store.save(x, SaveRequest{Need::Derivative, &relu, "relu", "act"});  // an exact 1-bit mask
  EXPECT_EQ(saved_bytes() - before, 200 + 13);
  const std::vector<float> dx = store.load(d).to_vector();
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_EQ(dx[i], x.to_vector()[i] > 0 ? 1.0f : 0.0f) << i;

  Tensor mask = Tensor::empty(Shape{100}, DType::u8);
  for (int64_t i = 0; i < 100; ++i) mask.data<uint8_t>()[i] = static_cast<uint8_t>(i % 3 == 0);
  const SavedHandle m = store.save(mask, SaveRequest{Need::Mask, nullptr, "dropout", "drop"});  // packed, 1 bit
  EXPECT_EQ(saved_bytes() - before, 200 + 13 + 13);
  EXPECT_EQ(store.load(m).to_vector(), mask.to_vector());

  SaveRequest er{Need::Value, nullptr, "batchnorm2d", "bn1"};
  er.exact = true;
  const Tensor stats = random_tensor(Shape{8}, 2);
  const SavedHandle e = store.save(stats, er);  // a reference, moved to the Saved tag
  EXPECT_EQ(saved_bytes() - before, 200 + 13 + 13 + 32);
  EXPECT_EQ(store.load(e).to_vector(), stats.to_vector());

  std::vector<SavedRecord> recs;
  store.describe(recs);
  ASSERT_EQ(recs.size(), 5u);
  EXPECT_EQ(recs[0].scheme, "bf16");
  EXPECT_EQ(recs[0].bits, 16);
  EXPECT_EQ(recs[0].bytes, 200);
  EXPECT_TRUE(recs[1].shared);
  EXPECT_EQ(recs[1].bytes, 0);
  EXPECT_EQ(recs[2].bits, 1);
  EXPECT_EQ(recs[3].need, Need::Mask);
  EXPECT_EQ(recs[4].scheme, "fp32");
  int64_t total = 0;
  for (const auto& r : recs) total += r.bytes;
  EXPECT_EQ(total, saved_bytes() - before);
  EXPECT_EQ(store.live_count(), 5u);

  Tensor y = x;
  y.bump_version();  // an in-place op after the save
  EXPECT_NE(testing::message_of([&] { store.load(v1); }).find("conv2d conv1: a tensor saved for backward was modified "
                                                              "in place"),
            std::string::npos);
  for (const SavedHandle& h : {v1, v2, d, m, e}) h.store->release(h);
  EXPECT_EQ(store.live_count(), 0u);
  EXPECT_EQ(saved_bytes(), before);
  EXPECT_EQ(testing::message_of([&] { store.load(v1); }),
            "bf16 store: saved tensor " + std::to_string(v1.id) + " was already released (a second backward?)");
}

// A recompute loads its segment's input (a decode into a buffer of its own) and the segment's
// first op saves that buffer again: it is held as the codes it was decoded from (no second
// encoding, no second rounding), until both entries are released; a decode modified in place, or
// saved in another form, is a tensor of its own.
TEST(CompressingStore, ABufferDecodedFromAnEncodingIsHeldAsThatEncodingWhenSavedAgain) {
  Bf16Store store;
  const int64_t before = saved_bytes();
  const Tensor x = random_tensor(Shape{4, 25}, 3);
  const SavedHandle input = store.save(x, SaveRequest{Need::Value, nullptr, "checkpoint", "block"});
  const Tensor decoded = store.load(input);  // what the recompute runs on
  const SavedHandle again = store.save(decoded, SaveRequest{Need::Value, nullptr, "linear", "block.fc"});
  EXPECT_EQ(saved_bytes() - before, 200) << "the decode is the encoding's values: nothing more is kept";
  EXPECT_EQ(store.load(again).to_vector(), decoded.to_vector());
  std::vector<SavedRecord> recs;
  store.describe(recs);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_TRUE(recs[1].shared);
  EXPECT_EQ(recs[1].bytes, 0);

  Tensor changed = store.load(input);
  changed.bump_version();  // modified in place before its save: other values
  const SavedHandle other = store.save(changed, SaveRequest{Need::Value, nullptr, "linear", "block.fc"});
  EXPECT_EQ(saved_bytes() - before, 400);
  const Pointwise& relu = pointwise_by_name("relu");
  const SavedHandle mask = store.save(decoded, SaveRequest{Need::Derivative, &relu, "relu", "block.act"});
  EXPECT_EQ(saved_bytes() - before, 400 + 13) << "a step mask is another form of the buffer";

  store.release(input);  // the segment's input goes first: its codes stay for the other entry
  EXPECT_EQ(store.load(again).to_vector(), decoded.to_vector());
  for (const SavedHandle& h : {again, other, mask}) store.release(h);
  EXPECT_EQ(saved_bytes(), before);
}

}  // namespace
}  // namespace packrat
