#include "data/idx.h"

#include "core/error.h"
#include "data/file_io.h"

namespace packrat::data {
namespace fs = std::filesystem;

IdxArray read_idx(const fs::path& path, int expected_rank, std::string_view who) {
  std::vector<uint8_t> bytes = read_gz_file(path, who);
  const std::string file = path.string();
  if (bytes.size() < 4) fail("{}: {} is truncated: {} bytes, shorter than the 4-byte IDX magic number", who, file, bytes.size());
  if (bytes[0] != 0 || bytes[1] != 0)
    fail("{}: {} is not an IDX file: magic number starts with {:#04x} {:#04x}, expected 0x00 0x00", who, file,
         bytes[0], bytes[1]);
  if (bytes[2] != 0x08) fail("{}: {} holds IDX type {:#04x}, only unsigned bytes (0x08) are supported", who, file, bytes[2]);
  const int rank = bytes[3];
  if (rank != expected_rank)
    fail("{}: {} has {} dimensions, expected {} ({})", who, file, rank, expected_rank,
         expected_rank == 3 ? "images N x H x W" : "labels N");
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < header)
    fail("{}: {} is truncated: {} bytes, shorter than its {}-byte header", who, file, bytes.size(), header);
  IdxArray a;
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    const uint8_t* p = bytes.data() + 4 + 4 * d;
    const int64_t dim = (int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | int64_t{p[3]};
    if (dim == 0) fail("{}: {} has dimension {} of size 0", who, file, d);
    if (count > (int64_t{1} << 48) / dim)  // no real IDX file comes near 2^48 bytes; the product would overflow
      fail("{}: {} is corrupt: its dimensions promise more than 2^48 data bytes (dimension {} is {})", who, file, d, dim);
    a.dims.push_back(dim);
    count *= dim;
  }
  const int64_t have = static_cast<int64_t>(bytes.size() - header);
  if (have < count)
    fail("{}: {} is truncated: its header promises {} data bytes, the file holds {} ({} missing)", who, file, count,
         have, count - have);
  if (have > count)
    fail("{}: {} is corrupt: {} bytes after the {} data bytes its header promises", who, file, have - count, count);
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header));
  a.data = std::move(bytes);
  return a;
}

fs::path idx_images_file(const fs::path& dir, Split split) {
  return dir / (split == Split::Train ? "train-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte.gz");
}
fs::path idx_labels_file(const fs::path& dir, Split split) {
  return dir / (split == Split::Train ? "train-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte.gz");
}

std::shared_ptr<InMemoryDataset> load_idx_dataset(const fs::path& images, const fs::path& labels,
                                                  std::vector<std::string> class_names, std::string who) {
  IdxArray im = read_idx(images, 3, who);  // (N, H, W)
  IdxArray lb = read_idx(labels, 1, who);  // (N)
  if (im.dims[0] != lb.dims[0])
    fail("{}: {} holds {} images but {} holds {} labels", who, images.string(), im.dims[0], labels.string(), lb.dims[0]);
  const int64_t classes = static_cast<int64_t>(class_names.size());
  std::vector<int64_t> lab(lb.data.size());  // (N)
  for (size_t i = 0; i < lb.data.size(); ++i) {
    if (lb.data[i] >= classes)
      fail("{}: {} is corrupt: label {} is {}, expected 0..{}", who, labels.string(), i, lb.data[i], classes - 1);
    lab[i] = lb.data[i];
  }
  auto ds = std::make_shared<InMemoryDataset>(who, ImageShape{1, im.dims[1], im.dims[2]}, std::move(class_names),
                                              std::move(im.data), std::move(lab));
  ds->set_source(images.string());
  return ds;
}

std::vector<std::string> fashion_mnist_class_names() {
  return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
}

std::vector<std::string> mnist_class_names() { return {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}; }

}  // namespace packrat::data
