#include "data/transforms.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/philox.h"

namespace packrat::data {

namespace {
int64_t below(uint32_t word, int64_t n) { return static_cast<int64_t>((static_cast<uint64_t>(word) * static_cast<uint64_t>(n)) >> 32); }
}  // namespace

// ---- RandomCrop ----

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding) : height_(height), width_(width), padding_(padding) {
  PACKRAT_CHECK(height > 0 && width > 0 && padding >= 0, "random_crop: size {}x{} and padding {} must be positive",
                height, width, padding);
  PACKRAT_CHECK(height <= kMaxImageSide && width <= kMaxImageSide && padding <= kMaxImageSide,
                "random_crop: size {}x{} and padding {} must be at most {}", height, width, padding, kMaxImageSide);
}

std::string RandomCrop::describe() const { return fmt::format("random_crop({}, {}, padding={})", height_, width_, padding_); }

ImageShape RandomCrop::output_shape(const ImageShape& in) const {
  PACKRAT_CHECK(in.h + 2 * padding_ >= height_ && in.w + 2 * padding_ >= width_,
                "random_crop: a {}x{} window does not fit a {}x{} image padded by {}", height_, width_, in.h, in.w,
                padding_);
  return {in.c, height_, width_};
}

void RandomCrop::offsets(const ImageShape& s, const uint32_t words[4], int64_t& dy, int64_t& dx) const {
  dy = below(words[0], s.h + 2 * padding_ - height_ + 1);
  dx = below(words[1], s.w + 2 * padding_ - width_ + 1);
}

void RandomCrop::apply(const float* in, const ImageShape& s, float* out, const uint32_t words[4]) const {
  int64_t dy, dx;
  offsets(s, words, dy, dx);
  // Output row y reads input row y + dy - padding; columns likewise. Outside the image: 0.
  const int64_t y0 = dy - padding_, x0 = dx - padding_;
  const int64_t xa = std::clamp<int64_t>(-x0, 0, width_), xb = std::clamp<int64_t>(s.w - x0, 0, width_);
  for (int64_t c = 0; c < s.c; ++c) {
    for (int64_t y = 0; y < height_; ++y) {
      float* o = out + (c * height_ + y) * width_;
      const int64_t iy = y + y0;
      if (iy < 0 || iy >= s.h || xa >= xb) {
        std::fill(o, o + width_, 0.0f);
        continue;
      }
      const float* row = in + (c * s.h + iy) * s.w;
      std::fill(o, o + xa, 0.0f);
      std::memcpy(o + xa, row + xa + x0, static_cast<size_t>(xb - xa) * sizeof(float));
      std::fill(o + xb, o + width_, 0.0f);
    }
  }
}

// ---- RandomHorizontalFlip ----

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  PACKRAT_CHECK(p >= 0 && p <= 1, "hflip: probability {} is outside [0, 1]", p);
}

std::string RandomHorizontalFlip::describe() const { return fmt::format("hflip({})", p_); }

bool RandomHorizontalFlip::flips(const uint32_t words[4]) const { return Philox4x32::to_uniform(words[0]) < p_; }

void RandomHorizontalFlip::apply(const float* in, const ImageShape& s, float* out, const uint32_t words[4]) const {
  if (!flips(words)) {
    std::memcpy(out, in, static_cast<size_t>(s.numel()) * sizeof(float));
    return;
  }
  for (int64_t r = 0; r < s.c * s.h; ++r) {
    const float* i = in + r * s.w;
    float* o = out + r * s.w;
    for (int64_t x = 0; x < s.w; ++x) o[x] = i[s.w - 1 - x];
  }
}

// ---- Resize ----

Resize::Resize(int64_t height, int64_t width) : height_(height), width_(width) {
  PACKRAT_CHECK(height > 0 && width > 0 && height <= kMaxImageSide && width <= kMaxImageSide,
                "resize: size {}x{} must be in [1, {}]", height, width, kMaxImageSide);
}

std::string Resize::describe() const { return fmt::format("resize({}, {})", height_, width_); }

void Resize::apply(const float* in, const ImageShape& s, float* out, const uint32_t*) const {
  resize_bilinear(in, s, out, height_, width_);
}

void resize_bilinear(const float* in, const ImageShape& s, float* out, int64_t oh, int64_t ow) {
  PACKRAT_CHECK(s.h > 0 && s.w > 0 && oh > 0 && ow > 0, "resize: cannot resize {}x{} pixels to {}x{}", s.h, s.w, oh,
                ow);
  if (oh == s.h && ow == s.w) {
    std::memcpy(out, in, static_cast<size_t>(s.numel()) * sizeof(float));
    return;
  }
  // Source coordinate of output index d: (d + 0.5) * in / out - 0.5, clamped below at 0.
  struct Tap { int64_t i0, i1; float l1; };
  auto taps = [](int64_t in_n, int64_t out_n) {
    std::vector<Tap> t(static_cast<size_t>(out_n));
    const double scale = static_cast<double>(in_n) / static_cast<double>(out_n);
    for (int64_t d = 0; d < out_n; ++d) {
      const double src = std::max(0.0, (d + 0.5) * scale - 0.5);
      const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(src), in_n - 1);
      t[d] = {i0, std::min<int64_t>(i0 + 1, in_n - 1), static_cast<float>(src - i0)};
    }
    return t;
  };
  const std::vector<Tap> ty = taps(s.h, oh), tx = taps(s.w, ow);
  for (int64_t c = 0; c < s.c; ++c) {
    const float* plane = in + c * s.h * s.w;
    for (int64_t y = 0; y < oh; ++y) {
      const Tap& a = ty[y];
      const float* r0 = plane + a.i0 * s.w;
      const float* r1 = plane + a.i1 * s.w;
      float* o = out + (c * oh + y) * ow;
      for (int64_t x = 0; x < ow; ++x) {
        const Tap& b = tx[x];
        const float top = r0[b.i0] + (r0[b.i1] - r0[b.i0]) * b.l1;
        const float bottom = r1[b.i0] + (r1[b.i1] - r1[b.i0]) * b.l1;
        o[x] = top + (bottom - top) * a.l1;
      }
    }
  }
}

// ---- Normalize ----

Normalize::Normalize(std::vector<float> mean, std::vector<float> std) : mean_(std::move(mean)), std_(std::move(std)) {
  PACKRAT_CHECK(!mean_.empty() && mean_.size() == std_.size(), "normalize: {} means but {} standard deviations",
                mean_.size(), std_.size());
  for (float s : std_) PACKRAT_CHECK(s > 0, "normalize: standard deviation {} must be positive", s);
}

std::string Normalize::describe() const {
  return fmt::format("normalize(mean=[{}], std=[{}])", fmt::join(mean_, ", "), fmt::join(std_, ", "));
}

ImageShape Normalize::output_shape(const ImageShape& in) const {
  PACKRAT_CHECK(mean_.size() == 1 || static_cast<int64_t>(mean_.size()) == in.c,
                "normalize: {} channel statistics for images with {} channels", mean_.size(), in.c);
  return in;
}

void Normalize::apply(const float* in, const ImageShape& s, float* out, const uint32_t*) const {
  const int64_t plane = s.h * s.w;
  for (int64_t c = 0; c < s.c; ++c) {
    const size_t k = mean_.size() == 1 ? 0 : static_cast<size_t>(c);
    const float m = mean_[k], inv = 1.0f / std_[k];
    for (int64_t i = 0; i < plane; ++i) out[c * plane + i] = (in[c * plane + i] - m) * inv;
  }
}

// ---- Pipeline ----

Pipeline& Pipeline::add(std::shared_ptr<const Transform> t) {
  transforms_.push_back(std::move(t));
  return *this;
}

ImageShape Pipeline::output_shape(const ImageShape& in) const {
  ImageShape s = in;
  for (const auto& t : transforms_) s = t->output_shape(s);
  return s;
}

std::string Pipeline::describe() const {
  std::string s = "to_float";
  for (const auto& t : transforms_) s += " -> " + t->describe();
  return s;
}

void Pipeline::words(uint64_t seed, int64_t epoch, int64_t index, size_t position, uint32_t out[4]) {
  const uint64_t stream = kTransformStream | (static_cast<uint64_t>(epoch) << 8) | (position & 0xff);
  Philox4x32::generate(seed, stream, static_cast<uint64_t>(index), out);
}

void Pipeline::run(const uint8_t* chw, const ImageShape& s, float* out, uint64_t seed, int64_t epoch, int64_t index,
                   std::vector<float>& scratch) const {
  const size_t n = transforms_.size();
  // Largest intermediate image, for the two ping-pong buffers.
  int64_t biggest = s.numel();
  ImageShape cur = s;
  for (size_t t = 0; t + 1 < n; ++t) biggest = std::max(biggest, (cur = transforms_[t]->output_shape(cur)).numel());
  if (n == 0) {
    for (int64_t i = 0; i < s.numel(); ++i) out[i] = chw[i] * (1.0f / 255.0f);
    return;
  }
  scratch.resize(static_cast<size_t>(2 * biggest));
  float* bufs[2] = {scratch.data(), scratch.data() + biggest};
  for (int64_t i = 0; i < s.numel(); ++i) bufs[0][i] = chw[i] * (1.0f / 255.0f);
  cur = s;
  int which = 0;
  for (size_t t = 0; t < n; ++t) {
    uint32_t w[4];
    words(seed, epoch, index, t, w);
    float* dst = t + 1 == n ? out : bufs[1 - which];
    transforms_[t]->apply(bufs[which], cur, dst, w);
    cur = transforms_[t]->output_shape(cur);
    which = 1 - which;
  }
}

// ---- Parsing ----

void normalization_stats(std::string_view dataset, std::vector<float>& mean, std::vector<float>& std) {
  if (dataset == "cifar10") {
    mean = {0.4914f, 0.4822f, 0.4465f}, std = {0.2470f, 0.2435f, 0.2616f};
  } else if (dataset == "cifar100") {
    mean = {0.5071f, 0.4865f, 0.4409f}, std = {0.2673f, 0.2564f, 0.2762f};
  } else if (dataset == "fashion_mnist") {
    mean = {0.2860f}, std = {0.3530f};
  } else if (dataset == "mnist") {
    mean = {0.1307f}, std = {0.3081f};
  } else if (dataset == "imagenet") {
    mean = {0.485f, 0.456f, 0.406f}, std = {0.229f, 0.224f, 0.225f};
  } else {
    fail("normalize: no known statistics for '{}' (known: cifar10, cifar100, fashion_mnist, mnist, imagenet)", dataset);
  }
}

namespace {

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

std::vector<double> numbers(const std::string& item, const std::string& args) {
  std::vector<double> v;
  std::string tok;
  auto flush = [&] {
    const std::string t = trim(tok);
    tok.clear();
    if (t.empty()) return;
    size_t used = 0;
    double x = 0;
    try {
      x = std::stod(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size()) fail("transform '{}': '{}' is not a number", item, t);
    v.push_back(x);
  };
  for (char ch : args) {
    if (ch == ',' || std::isspace(static_cast<unsigned char>(ch))) flush();
    else tok += ch;
  }
  flush();
  return v;
}

// Sizes and paddings: whole numbers up to kMaxImageSide (beyond it an int64 could overflow, or
// a resize allocate terabytes per image).
int64_t whole(const std::string& item, double x) {
  if (x != std::floor(x) || x < 0) fail("transform '{}': {} is not a whole number", item, x);
  if (x > static_cast<double>(kMaxImageSide))
    fail("transform '{}': {} is larger than {}, the largest image side or padding", item, x, kMaxImageSide);
  return static_cast<int64_t>(x);
}

}  // namespace

Pipeline parse_pipeline(const std::vector<std::string>& items) {
  Pipeline p;
  for (const std::string& raw : items) {
    const std::string item = trim(raw);
    const size_t open = item.find('(');
    const std::string name = trim(item.substr(0, open));
    std::string args;
    if (open != std::string::npos) {
      if (item.back() != ')') fail("transform '{}': missing ')'", item);
      args = item.substr(open + 1, item.size() - open - 2);
    }
    if (name == "random_crop") {
      const auto v = numbers(item, args);
      if (v.size() == 2) p.add(std::make_shared<RandomCrop>(whole(item, v[0]), whole(item, v[0]), whole(item, v[1])));
      else if (v.size() == 3) p.add(std::make_shared<RandomCrop>(whole(item, v[0]), whole(item, v[1]), whole(item, v[2])));
      else fail("transform '{}': expected random_crop(size, padding) or random_crop(height, width, padding)", item);
    } else if (name == "hflip") {
      const auto v = numbers(item, args);
      if (v.size() > 1) fail("transform '{}': expected hflip or hflip(p)", item);
      p.add(std::make_shared<RandomHorizontalFlip>(v.empty() ? 0.5 : v[0]));
    } else if (name == "resize") {
      const auto v = numbers(item, args);
      if (v.size() == 1) p.add(std::make_shared<Resize>(whole(item, v[0]), whole(item, v[0])));
      else if (v.size() == 2) p.add(std::make_shared<Resize>(whole(item, v[0]), whole(item, v[1])));
      else fail("transform '{}': expected resize(size) or resize(height, width)", item);
    } else if (name == "normalize") {
      std::vector<float> mean, std;
      const size_t slash = args.find('/');
      if (slash == std::string::npos) {
        if (trim(args).empty()) fail("transform '{}': expected normalize(<dataset>) or normalize(means / stds)", item);
        normalization_stats(trim(args), mean, std);
      } else {
        for (double x : numbers(item, args.substr(0, slash))) mean.push_back(static_cast<float>(x));
        for (double x : numbers(item, args.substr(slash + 1))) std.push_back(static_cast<float>(x));
      }
      p.add(std::make_shared<Normalize>(mean, std));
    } else {
      fail("transform '{}': unknown transform '{}' (known: random_crop, hflip, resize, normalize)", item, name);
    }
  }
  return p;
}

}  // namespace packrat::data
