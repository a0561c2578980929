#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "core/error.h"
#include "data/file_io.h"
#include "data/jpeg_decode.h"
#include "data/transforms.h"

// stb_image with internal linkage, so no other object file's copy can clash with this one.
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_JPEG  // JPEG files go to libjpeg-turbo (data/jpeg_decode.h)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <stb_image.h>
#pragma GCC diagnostic pop

namespace packrat::data {
namespace fs = std::filesystem;

namespace {

bool is_image(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  static const char* const kExt[] = {".png", ".jpg", ".jpeg", ".bmp", ".tga", ".gif", ".pgm", ".ppm", ".pnm"};
  return std::any_of(std::begin(kExt), std::end(kExt), [&](const char* e) { return ext == e; });
}

std::vector<fs::path> images_under(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink))
    if (e.is_regular_file() && is_image(e.path())) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The most decoded bytes one byte of a real image file holds: deflate (PNG) stops near 1032:1,
// RLE BMP near 128:1 a channel, GIF's LZW a few thousand to 1 on a single colour.
constexpr int64_t kMaxDecodedBytesPerFileByte = 4096;
constexpr int64_t kMaxPixels = int64_t{1} << 28;  // 16384 x 16384

// stb_image believes a header: a 77-byte BMP claiming 4 x 16449541 pixels decoded to 200 MB of
// zeros (found by fuzz/image_folder_fuzz). Refuse, naming the file, before decoding.
void check_header_fits_file(const fs::path& file, const std::vector<uint8_t>& bytes, int64_t channels) {
  int w = 0, h = 0, n = 0;
  if (!stbi_info_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &n)) return;  // decode says why
  // A negative side (a BMP's height, found by image_folder_fuzz) made pixels * channels overflow.
  const int64_t pixels = int64_t{w} * h;
  PACKRAT_CHECK(w > 0 && h > 0 && pixels <= kMaxPixels,
                "image_folder: {} is corrupt or too large: its header promises {}x{} pixels (at most {})", file.string(), w,
                h, kMaxPixels);
  const int64_t decoded = pixels * channels;
  PACKRAT_CHECK(decoded <= kMaxDecodedBytesPerFileByte * static_cast<int64_t>(bytes.size()),
                "image_folder: {} is corrupt: its header promises {}x{} pixels ({} bytes decoded), more than its {} bytes "
                "can hold",
                file.string(), w, h, decoded, bytes.size());
}

}  // namespace

std::vector<uint8_t> decode_image(const fs::path& file, int64_t channels, int64_t height, int64_t width,
                                  ImageShape& shape) {
  const std::vector<uint8_t> bytes = read_file(file, "image_folder");
  int w = 0, h = 0, n = 0;
  std::vector<uint8_t> jpeg;                                                   // (h, w, channels) of a JPEG
  std::unique_ptr<uint8_t, void (*)(void*)> stb(nullptr, stbi_image_free);  // (h, w, channels) of the others
  if (is_jpeg(bytes)) {
    // As check_header_fits_file does for the others: no more pixels than the file's bytes can hold.
    const int64_t most = std::min(kMaxPixels, kMaxDecodedBytesPerFileByte * static_cast<int64_t>(bytes.size()) / channels);
    jpeg = decode_jpeg(file, bytes, static_cast<int>(channels), most, w, h);
  } else {
    check_header_fits_file(file, bytes, channels);
    stb.reset(stbi_load_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &n, static_cast<int>(channels)));
    if (!stb) {
      const char* why = stbi_failure_reason();  // may be null for some corrupt files
      fail("image_folder: {} cannot be decoded: {}", file.string(), why ? why : "corrupt or unsupported image");
    }
  }
  // stb_image decodes some corrupt files (a BMP of height 0) to an empty image.
  PACKRAT_CHECK(w > 0 && h > 0, "image_folder: {} is corrupt: it decodes to {}x{} pixels", file.string(), w, h);
  const uint8_t* hwc = stb ? stb.get() : jpeg.data();
  const int64_t C = channels, H = h, W = w;
  std::vector<uint8_t> chw(static_cast<size_t>(C * H * W));  // (C, H, W)
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x)
      for (int64_t c = 0; c < C; ++c) chw[(c * H + y) * W + x] = hwc[(y * W + x) * C + c];
  shape = {C, H, W};
  if (height <= 0 || width <= 0 || (height == H && width == W)) return chw;
  std::vector<float> in(chw.begin(), chw.end());           // (C, H, W)
  std::vector<float> out(static_cast<size_t>(C * height * width));  // (C, height, width)
  resize_bilinear(in.data(), shape, out.data(), height, width);
  std::vector<uint8_t> resized(out.size());
  for (size_t i = 0; i < out.size(); ++i) resized[i] = static_cast<uint8_t>(std::clamp(std::lround(out[i]), 0L, 255L));
  shape = {C, height, width};
  return resized;
}

ImageFolderDataset::ImageFolderDataset(const fs::path& root, ImageFolderOptions options, std::string name)
    : name_(name.empty() ? "image_folder " + root.string() : std::move(name)), options_(std::move(options)) {
  PACKRAT_CHECK(options_.channels == 1 || options_.channels == 3, "image_folder: channels must be 1 or 3, not {}",
                options_.channels);
  PACKRAT_CHECK((options_.height > 0) == (options_.width > 0), "image_folder: give both height and width to resize, not {}x{}",
                options_.height, options_.width);
  PACKRAT_CHECK(options_.height <= kMaxImageSide && options_.width <= kMaxImageSide &&
                    options_.channels * options_.height * options_.width <= kMaxImageValues,
                "image_folder: a resize to {}x{} with {} channel(s) is larger than the loader takes (sides up to {}, {} "
                "values per image)",
                options_.height, options_.width, options_.channels, kMaxImageSide, kMaxImageValues);
  if (!fs::is_directory(root)) fail("image_folder: {} is not a directory", root.string());

  std::vector<std::pair<fs::path, std::string>> found;  // (file, class name)
  const fs::path annotations = root / "val_annotations.txt";
  if (fs::exists(annotations) && fs::is_directory(root / "images")) {
    for (const std::string& line : read_lines(annotations, "image_folder")) {
      const size_t tab1 = line.find('\t');
      if (tab1 == std::string::npos) fail("image_folder: {}: line '{}' has no tab", annotations.string(), line);
      const size_t tab2 = line.find('\t', tab1 + 1);
      found.emplace_back(root / "images" / line.substr(0, tab1), line.substr(tab1 + 1, tab2 - tab1 - 1));
    }
    std::sort(found.begin(), found.end());
  } else {
    std::vector<std::string> classes;
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory()) classes.push_back(e.path().filename().string());
    std::sort(classes.begin(), classes.end());
    for (const std::string& c : classes)
      for (fs::path& f : images_under(root / c)) found.emplace_back(std::move(f), c);
  }
  if (found.empty())
    fail("image_folder: {} holds no images (expected one sub-folder per class with .png/.jpg files inside)", root.string());

  class_names_ = options_.class_names;
  if (class_names_.empty()) {
    for (const auto& [file, c] : found) class_names_.push_back(c);
    std::sort(class_names_.begin(), class_names_.end());
    class_names_.erase(std::unique(class_names_.begin(), class_names_.end()), class_names_.end());
  }
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < class_names_.size(); ++i) index[class_names_[i]] = static_cast<int64_t>(i);
  for (auto& [file, c] : found) {
    auto it = index.find(c);
    if (it == index.end()) fail("image_folder: {} is in class '{}', which is not among the {} given classes", file.string(), c, class_names_.size());
    files_.push_back(file);
    labels_.push_back(it->second);
  }

  // The shape: the resize target, else the first image's size.
  ImageShape first;
  std::vector<uint8_t> img = decode_image(files_[0], options_.channels, options_.height, options_.width, first);
  shape_ = first;
  if (options_.preload) {
    pixels_.resize(static_cast<size_t>(size() * shape_.numel()));
    for (int64_t i = 0; i < size(); ++i) {
      if (i > 0) img = decode_image(files_[i], options_.channels, options_.height, options_.width, first);
      if (first != shape_)
        fail("image_folder: {} is {}x{} but {} is {}x{}; set a resize (height, width) to use images of mixed sizes",
             files_[i].string(), first.h, first.w, files_[0].string(), shape_.h, shape_.w);
      std::memcpy(pixels_.data() + i * shape_.numel(), img.data(), img.size());
    }
  }
}

int64_t ImageFolderDataset::get(int64_t i, uint8_t* chw) const {
  PACKRAT_CHECK(i >= 0 && i < size(), "{}: sample {} out of range (size {})", name_, i, size());
  if (!pixels_.empty()) {
    std::memcpy(chw, pixels_.data() + i * shape_.numel(), static_cast<size_t>(shape_.numel()));
    return labels_[i];
  }
  ImageShape s;
  const std::vector<uint8_t> img = decode_image(files_[i], options_.channels, options_.height, options_.width, s);
  if (s != shape_)
    fail("image_folder: {} is {}x{} but {} is {}x{}; set a resize (height, width) to use images of mixed sizes",
         files_[i].string(), s.h, s.w, files_[0].string(), shape_.h, shape_.w);
  std::memcpy(chw, img.data(), img.size());
  return labels_[i];
}

}  // namespace packrat::data
