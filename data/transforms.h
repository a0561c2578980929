#pragma once
// Per-sample image transforms on f32 (C, H, W) data, and the pipeline that runs them.
//
// The pipeline first turns u8 pixels into f32 in [0, 1] (x / 255, as torchvision's ToTensor),
// then applies the transforms in order; so RandomCrop's zero padding is black, and Normalize
// takes its mean and std in [0, 1] units, as in torchvision.
//
// Randomness is a pure function of (seed, epoch, sample index, transform position): transform t
// of dataset sample i in epoch e gets the four Philox-4x32 words of
// (key = seed, stream = kTransformStream | e << 8 | t, counter = i). A sample is augmented the
// same way whatever the batch size, thread count or resume point.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"

namespace packrat::data {

// The largest image side, crop size or padding a transform accepts, and the most values one
// image may have after the transforms (2^28 f32 = 1 GiB; the loader refuses more when made).
constexpr int64_t kMaxImageSide = int64_t{1} << 16;
constexpr int64_t kMaxImageValues = int64_t{1} << 28;

class Transform {
 public:
  virtual ~Transform() = default;
  virtual std::string describe() const = 0;  // "random_crop(32, 32, padding=4)"
  virtual ImageShape output_shape(const ImageShape& in) const = 0;  // throws if `in` does not fit
  // in: (C, H, W) of shape `s`; out: output_shape(s), never the same buffer as `in`.
  // `words` are this sample's four random words (ignored by deterministic transforms).
  virtual void apply(const float* in, const ImageShape& s, float* out, const uint32_t words[4]) const = 0;
};

// Pads every side with `padding` zeros, then cuts a height x width window at a uniformly random
// offset (dy from words[0], dx from words[1]): out(c, y, x) = padded(c, y + dy, x + dx).
class RandomCrop : public Transform {
 public:
  RandomCrop(int64_t height, int64_t width, int64_t padding);
  std::string describe() const override;
  ImageShape output_shape(const ImageShape& in) const override;
  void apply(const float* in, const ImageShape& s, float* out, const uint32_t words[4]) const override;
  // The offsets a sample gets for an input of shape s (exposed for tests).
  void offsets(const ImageShape& s, const uint32_t words[4], int64_t& dy, int64_t& dx) const;

 private:
  int64_t height_, width_, padding_;
};

// Mirrors left-right with probability p (when uniform(words[0]) < p).
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  std::string describe() const override;
  ImageShape output_shape(const ImageShape& in) const override { return in; }
  void apply(const float* in, const ImageShape& s, float* out, const uint32_t words[4]) const override;
  bool flips(const uint32_t words[4]) const;

 private:
  double p_;
};

// Bilinear resize, half-pixel centres (PyTorch's interpolate(mode="bilinear", align_corners=False)
// without antialiasing).
class Resize : public Transform {
 public:
  Resize(int64_t height, int64_t width);
  std::string describe() const override;
  ImageShape output_shape(const ImageShape& in) const override { return {in.c, height_, width_}; }
  void apply(const float* in, const ImageShape& s, float* out, const uint32_t words[4]) const override;

 private:
  int64_t height_, width_;
};

// out(c) = (in(c) - mean[c]) / std[c]; one value each broadcasts over all channels.
class Normalize : public Transform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std);
  std::string describe() const override;
  ImageShape output_shape(const ImageShape& in) const override;
  void apply(const float* in, const ImageShape& s, float* out, const uint32_t words[4]) const override;

 private:
  std::vector<float> mean_, std_;
};

// in: (C, H, W) -> out: (C, oh, ow), bilinear with half-pixel centres.
void resize_bilinear(const float* in, const ImageShape& s, float* out, int64_t oh, int64_t ow);

constexpr uint64_t kTransformStream = 0x7A11ull << 48;  // keeps these draws apart from other Philox users

class Pipeline {
 public:
  Pipeline() = default;
  Pipeline& add(std::shared_ptr<const Transform> t);
  bool empty() const { return transforms_.empty(); }
  size_t size() const { return transforms_.size(); }
  ImageShape output_shape(const ImageShape& in) const;
  std::string describe() const;  // "random_crop(...) -> hflip(0.5) -> normalize(...)"

  // chw: u8 (C, H, W) of shape s; out: f32 output_shape(s). `scratch` is reused between calls.
  void run(const uint8_t* chw, const ImageShape& s, float* out, uint64_t seed, int64_t epoch, int64_t index,
           std::vector<float>& scratch) const;
  // The four words transform `position` gets for (seed, epoch, index).
  static void words(uint64_t seed, int64_t epoch, int64_t index, size_t position, uint32_t out[4]);

 private:
  std::vector<std::shared_ptr<const Transform>> transforms_;
};

// Builds a pipeline from a compact text form, one transform per item, e.g.
//   {"random_crop(32, 4)", "hflip", "normalize(cifar10)"}
// Items: random_crop(size, padding) | random_crop(height, width, padding) | hflip | hflip(p) |
//        resize(size) | resize(height, width) | normalize(<dataset>) with a dataset that has known
//        statistics (see normalization_stats) | normalize(m1 m2 m3 / s1 s2 s3).
Pipeline parse_pipeline(const std::vector<std::string>& items);

// Published per-channel statistics (in [0, 1] units) of cifar10, cifar100, fashion_mnist, mnist,
// imagenet. Throws for other names.
void normalization_stats(std::string_view dataset, std::vector<float>& mean, std::vector<float>& std);

}  // namespace packrat::data
