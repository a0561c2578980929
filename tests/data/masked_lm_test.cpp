// BERT's masking for data.dataset: text with train.task: mlm (data/masked_lm.h): 15% of the byte
// positions chosen, 80/10/10 mask / random byte / unchanged, -100 targets elsewhere, keyed by
// (seed, epoch, sample) so any batching or resume point gives the same masks.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "data/loader.h"
#include "data/masked_lm.h"
#include "data/registry.h"
#include "data/text.h"
#include "data/tokens.h"
#include "tests/data/fixtures.h"

using namespace packrat;
using namespace packrat::data;
using namespace packrat::data::testing;

namespace {

const std::string kFixture = std::string(PACKRAT_SOURCE_DIR) + "/tests/data/text/gpl3_excerpt.txt";

struct Masked {
  std::vector<int64_t> tokens, targets;
  bool operator==(const Masked&) const = default;
};

Masked mask(const std::vector<uint8_t>& window, uint64_t seed, int64_t epoch, int64_t sample) {
  const auto t = static_cast<int64_t>(window.size()) + 1;  // the class token, then T - 1 bytes
  Masked m{std::vector<int64_t>(t), std::vector<int64_t>(t)};
  mask_window(window.data(), t, seed, epoch, sample, m.tokens.data(), m.targets.data());
  return m;
}

std::vector<uint8_t> letters(int64_t n) {
  std::vector<uint8_t> w;
  for (int64_t i = 0; i < n; ++i) w.push_back(static_cast<uint8_t>('a' + i % 26));
  return w;
}

}  // namespace

TEST(MaskedLm, FifteenPercentOfTheBytePositionsArePredicted) {
  EXPECT_EQ(masked_positions(128), 19);  // round(0.15 * 127)
  EXPECT_EQ(masked_positions(2), 1);     // at least one
  EXPECT_EQ(masked_positions(11), 2);    // round(1.5)
  const std::vector<uint8_t> w = letters(127);
  for (int64_t sample = 0; sample < 20; ++sample) {
    const Masked m = mask(w, 1, 0, sample);
    EXPECT_EQ(m.tokens[0], kClsToken);
    EXPECT_EQ(m.targets[0], kIgnoreTarget);
    int64_t chosen = 0;
    for (size_t j = 1; j < m.tokens.size(); ++j) {
      if (m.targets[j] == kIgnoreTarget) {
        EXPECT_EQ(m.tokens[j], w[j - 1]) << j;  // not chosen: unchanged
        continue;
      }
      ++chosen;
      EXPECT_EQ(m.targets[j], w[j - 1]) << j;  // the original byte
      EXPECT_TRUE(m.tokens[j] == kMaskToken || (m.tokens[j] > kMaskToken && m.tokens[j] < 256)) << m.tokens[j];
    }
    EXPECT_EQ(chosen, 19);
  }
}

TEST(MaskedLm, ChosenPositionsAreEightyPercentMaskTenRandomTenKept) {
  const std::vector<uint8_t> w(255, 'e');
  int64_t chosen = 0, masked = 0, kept = 0, random = 0;
  std::set<int64_t> positions;
  for (int64_t sample = 0; sample < 2000; ++sample) {
    const Masked m = mask(w, 7, 3, sample);
    for (size_t j = 1; j < m.tokens.size(); ++j) {
      if (m.targets[j] == kIgnoreTarget) continue;
      ++chosen;
      positions.insert(static_cast<int64_t>(j));
      if (m.tokens[j] == kMaskToken) ++masked;
      else if (m.tokens[j] == 'e') ++kept;  // a random byte is 'e' 1 time in 253
      else ++random;
    }
  }
  // 2000 x 38 draws: binomial standard deviations of about 0.2% (80%) and 0.15% (10%).
  EXPECT_NEAR(static_cast<double>(masked) / chosen, 0.8, 0.01);
  EXPECT_NEAR(static_cast<double>(random) / chosen, 0.1 * 252.0 / 253.0, 0.01);
  EXPECT_NEAR(static_cast<double>(kept) / chosen, 0.1 + 0.1 / 253.0, 0.01);
  EXPECT_EQ(positions.size(), 255u);  // every byte position is chosen some time, the class token never
}

TEST(MaskedLm, MasksDependOnSeedEpochAndSampleOnly) {
  const std::vector<uint8_t> w = letters(63);
  EXPECT_EQ(mask(w, 1, 2, 3), mask(w, 1, 2, 3));
  EXPECT_NE(mask(w, 1, 2, 3), mask(w, 1, 2, 4));
  EXPECT_NE(mask(w, 1, 2, 3), mask(w, 1, 3, 3));
  EXPECT_NE(mask(w, 1, 2, 3), mask(w, 2, 2, 3));
  // Reserved bytes of the text read as '?'.
  const std::vector<uint8_t> reserved{0, 1, 2, 'x'};
  for (int64_t sample = 0; sample < 8; ++sample) {
    const Masked m = mask(reserved, 0, 0, sample);
    for (size_t j = 1; j < 4; ++j)
      if (m.targets[j] != kIgnoreTarget) EXPECT_EQ(m.targets[j], '?');
      else EXPECT_EQ(m.tokens[j], '?');
  }
}

TEST(MaskedLm, LoaderMasksEachSampleAlikeWhateverTheBatchingOrResumePoint) {
  DatasetSpec spec;
  spec.name = "text";
  spec.root = kFixture;
  spec.seq_len = 32;
  auto ds = open_dataset(spec);
  const auto& text = dynamic_cast<const TextDataset&>(*ds);
  auto batches = [&](int64_t batch_size, int64_t epoch, int64_t first_batch, bool fixed) {
    Loader l(ds, Pipeline{}, {.batch_size = batch_size, .shuffle = true, .seed = 5, .masked_lm = true,
                              .fixed_masks = fixed});
    l.start_epoch(epoch, first_batch);
    std::map<int64_t, Masked> out;
    for (Batch b; l.next(b);) {
      EXPECT_EQ(b.labels.shape(), (Shape{b.images.dim(0), 32}));
      for (int64_t n = 0; n < b.images.dim(0); ++n) {
        Masked m{{b.images.data<int64_t>() + n * 32, b.images.data<int64_t>() + (n + 1) * 32},
                 {b.labels.data<int64_t>() + n * 32, b.labels.data<int64_t>() + (n + 1) * 32}};
        out[b.indices[n]] = m;
      }
    }
    return out;
  };
  const auto a = batches(8, 2, 0, false), b = batches(5, 2, 0, false), resumed = batches(8, 2, 3, false);
  ASSERT_EQ(a.size(), static_cast<size_t>(ds->size()));
  EXPECT_EQ(a, b);
  for (const auto& [i, m] : resumed) EXPECT_EQ(m, a.at(i)) << i;
  // Sample i of epoch 2 is the window's first 31 bytes masked with (5, 2, i).
  const int64_t i = 7;
  const std::vector<uint8_t> w(text.window(i), text.window(i) + 31);
  EXPECT_EQ(a.at(i), mask(w, 5, 2, i));
  // Another epoch draws other masks; fixed masks are epoch 0's in every epoch.
  EXPECT_NE(batches(8, 3, 0, false).at(i), a.at(i));
  EXPECT_EQ(batches(8, 3, 0, true).at(i), mask(w, 5, 0, i));
  // Only text; a sample needs a byte after the class token.
  spec.seq_len = 1;
  EXPECT_NE(message_of([&] { Loader(open_dataset(spec), Pipeline{}, {.masked_lm = true}); }).find("at least 2"),
            std::string::npos);
}
