// PlainRuns: the CPU codecs' walk of a blocked buffer in plain order. Runs within one channel
// block's tile and runs across several (groups of several small planes) read the plain tensor's
// elements and write them to their blocked places, and a thread's runs that start and end inside
// a tile (the rest of it another thread's) write only their own elements; threads' ranges of
// groups start at tile edges where they can (group_at_tile_edge).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "quant/cpu/plain_runs.h"

namespace packrat {
namespace {

// (3, 32, 3, 3): planes of 9, so that a tile (block x 9 plain elements) holds 72 or 144 and runs
// of up to 200 span up to three tiles.
const Shape kShape{3, 32, 3, 3};

Tensor numbered_plain() {
  Tensor t = Tensor::empty(kShape);  // (N, C, H, W)
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

CodecWalk walk_of(Layout layout) {
  return CodecWalk{kShape[1], kShape[2] * kShape[3], false, layout == Layout::nChw16c ? 16 : 8};
}

// Runs in rising order over [begin, end): lengths 5, 40, 1, 200, 17, 72, ... cut at end.
std::vector<std::pair<int64_t, int64_t>> runs_over(int64_t begin, int64_t end) {
  const int64_t lengths[] = {5, 40, 1, 200, 17, 72, 3, 150};
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t e = begin, k = 0; e < end; ++k) {
    const int64_t n = std::min(lengths[k % 8], end - e);
    runs.push_back({e, n});
    e += n;
  }
  return runs;
}

TEST(PlainRuns, RunsWithinAndAcrossTilesReadThePlainElements) {
  const Tensor plain = numbered_plain();
  for (Layout layout : {Layout::nChw8c, Layout::nChw16c}) {
    SCOPED_TRACE(layout_name(layout));
    const Tensor blocked = plain.to_layout(layout);
    PlainRuns walk(walk_of(layout), 200);
    int across = 0;
    for (const auto& [e0, n] : runs_over(30, plain.numel() - 11)) {
      across += walk.in_one_tile(e0, n) ? 0 : 1;
      const float* got = walk.read(blocked.data<float>(), e0, n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], static_cast<float>(e0 + i)) << "run at " << e0 << " + " << i;
    }
    EXPECT_GE(across, 4);  // the case this test is for
  }
}

TEST(PlainRuns, RunsWriteTheirElementsToTheirBlockedPlacesAndNothingElse) {
  const Tensor plain = numbered_plain();
  for (Layout layout : {Layout::nChw8c, Layout::nChw16c}) {
    SCOPED_TRACE(layout_name(layout));
    // Two threads' shares, each starting and ending inside a tile; the elements between them and
    // outside them are nobody's and keep their old value.
    const int64_t shares[2][2] = {{30, 420}, {421, plain.numel() - 11}};
    Tensor out = Tensor::empty(kShape, DType::f32, layout);
    for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = -1.0f;
    for (const auto& share : shares) {
      PlainRuns walk(walk_of(layout), 200);
      for (const auto& [e0, n] : runs_over(share[0], share[1])) {
        float* dst = walk.write(out.data<float>(), e0, n);
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(e0 + i);
      }
      walk.finish(out.data<float>());
    }
    const Tensor back = out.to_plain();
    for (int64_t e = 0; e < plain.numel(); ++e) {
      const bool written = (e >= 30 && e < 420) || (e >= 421 && e < plain.numel() - 11);
      ASSERT_EQ(back.data<float>()[e], written ? static_cast<float>(e) : -1.0f) << "plain element " << e;
    }
  }
}

// The codecs' threads take ranges of groups that start at tile edges where one lies near: the
// quickstart's first stage, (128, 16, 28, 28) in nChw8c (tiles of 8 x 784 values), per sample in
// groups of 256 (49 a sample: a tile edge only at each sample's start), per plane (4 groups a
// plane, an edge every 8 planes).
TEST(PlainRuns, ThreadRangesStartAtTileEdges) {
  const int64_t numel = 128 * 16 * 784;
  const CodecWalk blocked{16, 784, false, 8}, plain{};
  GroupQuantConfig c;
  c.group_size = 256;
  const GroupGeometry per_sample = group_geometry(numel, 128, c);
  EXPECT_EQ(group_at_tile_edge(per_sample, blocked, 128, 128), 147);  // the fourth sample's first group
  EXPECT_EQ(per_sample.group_start(147) % (8 * 784), 0);
  EXPECT_EQ(group_at_tile_edge(per_sample, blocked, 147, 128), 147);
  EXPECT_EQ(group_at_tile_edge(per_sample, blocked, 128, 19), 128);  // none within the limit: unchanged
  EXPECT_EQ(group_at_tile_edge(per_sample, plain, 128, 128), 128);   // a plain buffer has no tiles

  c.grouping = Grouping::PerPlane;
  const GroupGeometry per_plane = group_geometry(numel, 128, c, 784);
  EXPECT_EQ(group_at_tile_edge(per_plane, blocked, 100, 128), 128);  // plane 32's first group
  EXPECT_EQ(per_plane.group_start(128), 32 * 784);
}

}  // namespace
}  // namespace packrat
