#pragma once
// The CPU codecs' walk of a blocked buffer (nChw16c or nChw8c: CodecWalk without nhwc, B =
// walk.block) in plain order: a codec's groups or buckets are runs of the plain tensor's elements,
// which lie B floats apart within a channel plane of the blocked buffer. A thread takes its runs
// in rising order, so it transposes each B-channel tile of a sample into plain order once
// (PlainTile), not element by element run by run; a run across tiles (a group of several small
// planes) is copied piece by piece from and to the tiles' copies.
#include <algorithm>
#include <cstdint>
#include <memory>

#include "core/cpu/bf16_simd.h"
#include "core/half.h"
#include "quant/group/group_quant.h"  // CodecWalk

namespace packrat {

// One thread's copy, in plain order, of the B-channel tile of a blocked buffer that its runs are
// in: tile t holds channels Bk..Bk+B-1 of one sample, the plain elements
// [t * B * plane, (t + 1) * B * plane), which the blocked buffer stores (plane, B) and the
// copy (B, plane).
class PlainTile {
 public:
  explicit PlainTile(const CodecWalk& b)
      : b_(b), len_(b.block * b.plane), buf_(new float[static_cast<size_t>(len_)]) {}
  int64_t len() const { return len_; }  // plain elements a tile
  // The held tile's elements without a division (the codecs ask for every group's, a few times).
  int64_t tile_of(int64_t e) const { return tile_ >= 0 && e >= held_ && e - held_ < len_ ? tile_ : e / len_; }
  // Whether the plain elements [e0, e0 + n) lie in one tile.
  bool holds(int64_t e0, int64_t n) const { return tile_of(e0) == tile_of(e0 + n - 1); }
  // The plain elements [e0, e0 + n) of x (holds(e0, n)), from the tile's copy (f32 whether x
  // is f32 or bf16: T).
  template <typename T>
  const float* read(const T* x, int64_t e0);
  // Where to write the plain elements [e0, e0 + n) of out (holds(e0, n)); written back to out
  // when another tile is asked for, or by flush (rounded as Tensor::to rounds where out is bf16).
  template <typename T>
  float* write(T* out, int64_t e0, int64_t n);
  template <typename T>
  void flush(T* out);

 private:
  CodecWalk b_;
  int64_t len_, tile_ = -1, lo_ = 0, hi_ = 0;  // the tile held; its plain range written [lo_, hi_)
  // tile_'s first plain element (when tile_ >= 0), kept beside it: computing it in tile_of made the
  // 2-bit EfficientNet step about 3% slower (341-343 against 353 img/s, 1 thread).
  int64_t held_ = 0;
  void hold(int64_t t) { tile_ = t, held_ = t * len_; }
  std::unique_ptr<float[]> buf_;               // (B, plane), uninitialised: a tile is written before it is read
};

// A thread's runs of up to max_run plain elements, in rising order: from its PlainTile where a run
// lies in one tile, else through its own buffer, filled from or emptied into the tiles it spans.
class PlainRuns {
 public:
  PlainRuns(const CodecWalk& walk, int64_t max_run)
      : tile_(walk), run_(new float[static_cast<size_t>(max_run)]) {}
  // Whether the plain elements [e0, e0 + n) lie in one tile (any run of them may be written at once).
  bool in_one_tile(int64_t e0, int64_t n) const { return tile_.holds(e0, n); }
  // The tile of plain element e: pointers read from one tile stay valid until another is read.
  int64_t tile_of(int64_t e) const { return tile_.tile_of(e); }
  // The plain elements [e0, e0 + n) of x, as f32 (x: f32 or bf16, T).
  template <typename T>
  const float* read(const T* x, int64_t e0, int64_t n);
  // Where to put the plain elements [e0, e0 + n) of out (n <= max_run, or in_one_tile): they reach
  // out (f32 or bf16) by a later write or finish. One element type per PlainRuns.
  template <typename T>
  float* write(T* out, int64_t e0, int64_t n);
  // Every write's elements in out.
  template <typename T>
  void finish(T* out);

 private:
  template <typename T>
  void finish_run(T* out);  // the run in run_, if one is pending, into its tiles
  // fn(e, len) for the pieces [e, e + len) of [e0, e0 + n) that lie in one tile each, in order.
  template <typename Fn>
  void for_tile_pieces(int64_t e0, int64_t n, Fn&& fn) const {
    for (int64_t e = e0; e < e0 + n;) {
      const int64_t len = std::min((tile_.tile_of(e) + 1) * tile_.len() - e, e0 + n - e);
      fn(e, len);
      e += len;
    }
  }

  PlainTile tile_;
  std::unique_ptr<float[]> run_;            // (max_run,) a run across tiles, uninitialised
  int64_t pending_e0_ = 0, pending_n_ = 0;  // the run in run_ not yet in its tiles
};

// A thread's runs (groups, buckets) of a plain bf16 buffer as f32, converted a window of
// kMaxStagedGroup at a time (it stays in L2), so that the range and the codes of each run read f32
// values: the buffer itself where it is f32 (T = float, no copy). Runs of up to kMaxStagedGroup
// values. Converted run by run, the conversions of a few dozen values each cost more than
// converting the whole tensor (BM_GroupQuant_Bf16).
template <typename T>
class StagedRuns {
 public:
  explicit StagedRuns(int64_t) {}
  bool holds(int64_t, int64_t) const { return true; }
  const float* read(const T* x, int64_t e0, int64_t) { return x + e0; }
};
template <>
class StagedRuns<bf16_t> {
 public:
  explicit StagedRuns(int64_t end) : end_(end) {}  // end: the last element a thread reads, + 1
  // Whether [e0, e0 + n) is in the window (pointers read from it stay valid until a read misses).
  bool holds(int64_t e0, int64_t n) const { return e0 >= w0_ && e0 + n <= w1_; }
  const float* read(const bf16_t* x, int64_t e0, int64_t n) {
    if (!holds(e0, n)) {
      if (!buf_) buf_.reset(new float[kMaxStagedGroup]);  // (kMaxStagedGroup,) only where a plain buffer is read
      w0_ = e0;
      w1_ = std::min(end_, e0 + kMaxStagedGroup);
      simd::bf16_to_f32_run(x + w0_, w1_ - w0_, buf_.get());
    }
    return buf_.get() + (e0 - w0_);
  }

 private:
  int64_t end_, w0_ = 0, w1_ = 0;  // the window: elements [w0_, w1_)
  std::unique_ptr<float[]> buf_;  // the window's values
};

// Where a thread's range of g's groups may start: the first group from gi on (fewer than `limit`
// on) that starts a tile of walk's blocked buffer, else gi. Ranges cut there leave no tile to
// two threads, which would each transpose it and write their parts back element by element
// (PlainTile::flush): 12% of the quickstart's 2-bit codec elements went that way when ranges of
// 128 groups of 256 cut its tiles of 8 x 784 values.
int64_t group_at_tile_edge(const GroupGeometry& g, const CodecWalk& walk, int64_t gi, int64_t limit);

}  // namespace packrat
