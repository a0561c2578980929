#pragma once
// The dataset interface the loader reads from: a fixed number of labelled images of one
// shape, each handed out as u8 pixels in (C, H, W) order. Decoders (CIFAR, IDX, image
// folders) either hold every image decoded in memory (`InMemoryDataset`) or decode on
// demand; either way `get` is safe to call from several threads at once.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace packrat::data {

struct ImageShape {
  int64_t c = 0, h = 0, w = 0;
  int64_t numel() const { return c * h * w; }
  bool operator==(const ImageShape&) const = default;
  std::string str() const;  // "(3, 32, 32)"
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual const std::string& name() const = 0;  // "cifar10 train", for messages
  // The file (or folder) the images come from, for messages about their shape; default: name().
  virtual std::string source() const { return name(); }
  virtual int64_t size() const = 0;
  virtual ImageShape image_shape() const = 0;
  virtual int64_t num_classes() const = 0;
  virtual const std::vector<std::string>& class_names() const = 0;  // num_classes() entries
  // Writes sample i's pixels to `chw` (image_shape().numel() bytes) and returns its label.
  virtual int64_t get(int64_t i, uint8_t* chw) const = 0;
  virtual int64_t label(int64_t i) const = 0;
};

// Every image decoded up front: CIFAR-10 train is 50000 x 3072 bytes = 154 MB. This memory is
// host-side dataset storage, not tensor memory, so it is not counted by the allocator; the
// loader's batches are (tag Data).
class InMemoryDataset : public Dataset {
 public:
  InMemoryDataset(std::string name, ImageShape shape, std::vector<std::string> class_names,
                  std::vector<uint8_t> pixels, std::vector<int64_t> labels);

  const std::string& name() const override { return name_; }
  std::string source() const override { return source_.empty() ? name_ : source_; }
  void set_source(std::string file) { source_ = std::move(file); }
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  ImageShape image_shape() const override { return shape_; }
  int64_t num_classes() const override { return static_cast<int64_t>(class_names_.size()); }
  const std::vector<std::string>& class_names() const override { return class_names_; }
  int64_t get(int64_t i, uint8_t* chw) const override;
  int64_t label(int64_t i) const override;

  const uint8_t* pixels(int64_t i) const { return pixels_.data<uint8_t>() + i * shape_.numel(); }
  const std::vector<int64_t>& labels() const { return labels_; }

 private:
  std::string name_, source_;
  ImageShape shape_;
  std::vector<std::string> class_names_;
  Tensor pixels_;                // (N, C, H, W) u8, from the allocator under MemTag::Data
  std::vector<int64_t> labels_;  // (N)
};

}  // namespace packrat::data
