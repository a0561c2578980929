#include "data/dataset.h"

#include <cstring>

#include "core/error.h"

namespace packrat::data {

std::string ImageShape::str() const { return fmt::format("({}, {}, {})", c, h, w); }

InMemoryDataset::InMemoryDataset(std::string name, ImageShape shape, std::vector<std::string> class_names,
                                 std::vector<uint8_t> pixels, std::vector<int64_t> labels)
    : name_(std::move(name)), shape_(shape), class_names_(std::move(class_names)), labels_(std::move(labels)) {
  PACKRAT_CHECK(static_cast<int64_t>(pixels.size()) == size() * shape_.numel(),
                "{}: {} pixel bytes for {} images of shape {} (expected {})", name_, pixels.size(), size(),
                shape_.str(), size() * shape_.numel());
  // The decoded images are tensor memory like any other: the Data tag of reports counts them.
  // On the host, whatever the run's device: the loader reads them.
  pixels_ = Tensor::empty(Shape{static_cast<int64_t>(pixels.size())}, DType::u8, Layout::Plain, MemTag::Data,
                          Device::cpu());
  if (!pixels.empty()) std::memcpy(pixels_.raw(), pixels.data(), pixels.size());
  for (int64_t i = 0; i < size(); ++i)
    PACKRAT_CHECK(labels_[i] >= 0 && labels_[i] < num_classes(), "{}: sample {} has label {}, expected 0..{}", name_,
                  i, labels_[i], num_classes() - 1);
}

int64_t InMemoryDataset::get(int64_t i, uint8_t* chw) const {
  PACKRAT_CHECK(i >= 0 && i < size(), "{}: sample {} out of range (size {})", name_, i, size());
  std::memcpy(chw, pixels(i), static_cast<size_t>(shape_.numel()));
  return labels_[i];
}

int64_t InMemoryDataset::label(int64_t i) const {
  PACKRAT_CHECK(i >= 0 && i < size(), "{}: sample {} out of range (size {})", name_, i, size());
  return labels_[i];
}

}  // namespace packrat::data
