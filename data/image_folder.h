#pragma once
// A folder of images with one sub-folder per class (torchvision's ImageFolder), decoded with
// stb_image (PNG, JPEG, BMP, TGA, GIF, PNM). Class index = position of the sub-folder's name in
// sorted order; images are found recursively inside each class folder (so Tiny ImageNet's
// train/<wnid>/images/*.JPEG works) and taken in sorted path order.
// A folder holding `val_annotations.txt` and `images/` is read the Tiny ImageNet validation way:
// each annotation line is "<file>\t<class name>\t...".
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace packrat::data {

struct ImageFolderOptions {
  int64_t height = 0, width = 0;         // resize (bilinear) on load; 0 = keep, then all images must agree
  int64_t channels = 3;                  // 3 = RGB, 1 = grey (stb converts)
  bool preload = false;                  // decode every image at open; otherwise on each get()
  std::vector<std::string> class_names{};  // fixed class order (e.g. the train split's); empty = sorted folder names
};

class ImageFolderDataset : public Dataset {
 public:
  // Throws when the folder is missing, holds no class folders or no images, or (with preload)
  // an image cannot be decoded or has another size.
  ImageFolderDataset(const std::filesystem::path& root, ImageFolderOptions options, std::string name = "");

  const std::string& name() const override { return name_; }
  // The first image: unless resized, its size is every image's.
  std::string source() const override { return files_.front().string(); }
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  ImageShape image_shape() const override { return shape_; }
  int64_t num_classes() const override { return static_cast<int64_t>(class_names_.size()); }
  const std::vector<std::string>& class_names() const override { return class_names_; }
  int64_t get(int64_t i, uint8_t* chw) const override;
  int64_t label(int64_t i) const override { return labels_.at(static_cast<size_t>(i)); }
  const std::vector<std::filesystem::path>& files() const { return files_; }

 private:
  std::string name_;
  ImageFolderOptions options_;
  ImageShape shape_;
  std::vector<std::string> class_names_;
  std::vector<std::filesystem::path> files_;  // (N)
  std::vector<int64_t> labels_;               // (N)
  std::vector<uint8_t> pixels_;               // (N, C, H, W) when preloaded, else empty
};

// Decodes one image file to u8 (C, H, W), resized to height x width when both are nonzero.
// Throws naming the file when it cannot be read or decoded.
std::vector<uint8_t> decode_image(const std::filesystem::path& file, int64_t channels, int64_t height, int64_t width,
                                  ImageShape& shape);

}  // namespace packrat::data
