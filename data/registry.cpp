#include "data/registry.h"

#include <filesystem>

#include "core/error.h"
#include "data/download.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/text.h"
#include "data/text_classes.h"

namespace packrat::data {
namespace fs = std::filesystem;

namespace {

const char* split_name(Split s) { return s == Split::Train ? "train" : "test"; }

// Finds the folder holding `probe` (a file name): root/<top_dir>/probe or root/probe; fetches
// the archive when allowed; otherwise explains where it looked and how to get the data.
fs::path locate_cifar(const DatasetSpec& spec, const fs::path& root, ArchiveSource source, const std::string& probe,
                      const char* archive_name) {
  if (!spec.url.empty()) source.url = spec.url;
  if (!spec.md5.empty()) source.md5 = spec.md5;
  const fs::path nested = root / source.top_dir;
  if (fs::exists(nested / probe)) return nested;
  if (fs::exists(root / probe)) return root;
  if (spec.download) {
    const fs::path dir = fetch_archive(source, root);
    if (!fs::exists(dir / probe))
      fail("{}: {} was downloaded and unpacked but {} is not in it", spec.name, source.url, (dir / probe).string());
    return dir;
  }
  fail("{}: dataset not found: looked for {} and {}; set data.download: true to fetch {}, or unpack {} so that {}/ is "
       "under {}",
       spec.name, (nested / probe).string(), (root / probe).string(), source.url, archive_name, source.top_dir,
       root.string());
}

std::shared_ptr<Dataset> open_idx(const DatasetSpec& spec, const fs::path& root, std::vector<std::string> classes) {
  const fs::path images = idx_images_file(root, spec.split), labels = idx_labels_file(root, spec.split);
  if (!fs::exists(images)) {
    const char* no_download = spec.download ? " (data.download can fetch only cifar10 and cifar100)" : "";
    if (spec.name == "fashion_mnist")
      fail("fashion_mnist: dataset not found: looked for {}; install the Debian package dataset-fashion-mnist "
           "(apt-get install dataset-fashion-mnist, files under /usr/share/datasets/fashion-mnist) or set data.root to a "
           "folder holding the four *-ubyte.gz files{}",
           images.string(), no_download);
    fail("{}: dataset not found: looked for {}; put train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
         "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (from http://yann.lecun.com/exdb/mnist/ or a mirror) "
         "under {} or set data.root{}",
         spec.name, images.string(), root.string(), no_download);
  }
  return load_idx_dataset(images, labels, std::move(classes), fmt::format("{} {}", spec.name, split_name(spec.split)));
}

}  // namespace

std::string default_root(std::string_view name) {
  if (name == "cifar10") return "data/cifar10";
  if (name == "cifar100") return "data/cifar100";
  if (name == "fashion_mnist") return "/usr/share/datasets/fashion-mnist";
  if (name == "mnist") return "data/mnist";
  if (name == "text_classes") return kFortunesRoot;
  if (name == "image_folder" || name == "text") return "";
  fail("data: unknown dataset '{}' (known: cifar10, cifar100, fashion_mnist, mnist, image_folder, text, text_classes)",
       name);
}

Split parse_split(std::string_view s) {
  if (s == "train") return Split::Train;
  if (s == "test" || s == "val") return Split::Test;
  fail("data: unknown split '{}' (expected train or test)", s);
}

namespace {

std::shared_ptr<Dataset> open_checked(const DatasetSpec& spec) {
  const std::string root_s = spec.root.empty() ? default_root(spec.name) : spec.root;
  const fs::path root(root_s);
  if (spec.name == "cifar10") {
    const std::string probe = spec.split == Split::Train ? "data_batch_1.bin" : "test_batch.bin";
    return load_cifar10(locate_cifar(spec, root, cifar10_source(), probe, "cifar-10-binary.tar.gz"), spec.split);
  }
  if (spec.name == "cifar100") {
    Cifar100Label label;
    if (spec.label == "fine") label = Cifar100Label::Fine;
    else if (spec.label == "coarse") label = Cifar100Label::Coarse;
    else fail("cifar100: unknown label '{}' (expected fine or coarse)", spec.label);
    const std::string probe = spec.split == Split::Train ? "train.bin" : "test.bin";
    return load_cifar100(locate_cifar(spec, root, cifar100_source(), probe, "cifar-100-binary.tar.gz"), spec.split, label);
  }
  if (spec.name == "fashion_mnist") return open_idx(spec, root, fashion_mnist_class_names());
  if (spec.name == "mnist") return open_idx(spec, root, mnist_class_names());
  if (spec.name == "image_folder") {
    if (root_s.empty()) fail("image_folder: data.root is required (a folder holding train/ and val/ or test/)");
    fs::path dir = root / "train";
    if (spec.split == Split::Test) dir = fs::is_directory(root / "val") ? root / "val" : root / "test";
    if (!fs::is_directory(dir))
      fail("image_folder: dataset not found: {} is not a directory (expected {}/train/<class>/*.png and {}/val/ or "
           "{}/test/){}",
           dir.string(), root_s, root_s, root_s,
           spec.download ? " (data.download can fetch only cifar10 and cifar100)" : "");
    ImageFolderOptions o;
    o.height = spec.height, o.width = spec.width, o.channels = spec.channels, o.preload = spec.preload;
    // The test split takes the train split's classes, so both number them the same way.
    if (spec.split == Split::Test && fs::is_directory(root / "train")) {
      ImageFolderOptions names_only = o;
      names_only.preload = false;
      o.class_names = ImageFolderDataset(root / "train", names_only).class_names();
    }
    return std::make_shared<ImageFolderDataset>(dir, o, fmt::format("image_folder {} {}", split_name(spec.split), root_s));
  }
  if (spec.name == "text") {
    if (root_s.empty()) fail("text: data.root is required (a text file or a folder of text files)");
    std::vector<uint8_t> all = read_text_bytes(root, "data.root");
    const auto [begin, end] = text_split_range(static_cast<int64_t>(all.size()), spec.split);
    std::vector<uint8_t> part(all.begin() + begin, all.begin() + end);
    const char* which = spec.split == Split::Train ? "train (the first 90% of the bytes)" : "validation (the last 10%)";
    return std::make_shared<TextDataset>(fmt::format("text {} {}", which, root_s), std::move(part), spec.seq_len,
                                         "data.seq_len");
  }
  if (spec.name == "text_classes") return load_text_classes(root, spec.split, spec.seq_len, "data.root", "data.seq_len");
  default_root(spec.name);  // throws: unknown name
  return nullptr;
}

}  // namespace

std::shared_ptr<Dataset> open_dataset(const DatasetSpec& spec) {
  try {
    return open_checked(spec);
  } catch (const fs::filesystem_error& e) {  // permissions, a file where a folder should be, ...
    fail("{}: {}", spec.name, e.what());
  }
}

}  // namespace packrat::data
