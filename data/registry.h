#pragma once
// Opening a dataset by name, as the trainer's `data:` config section describes it.
//
//   name           default root                        files looked for
//   cifar10        data/cifar10                         <root>/cifar-10-batches-bin/*.bin (or <root>/*.bin)
//   cifar100       data/cifar100                        <root>/cifar-100-binary/{train,test}.bin (or <root>/*.bin)
//   fashion_mnist  /usr/share/datasets/fashion-mnist    <root>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
//   mnist          data/mnist                           same names as fashion_mnist
//   image_folder   (root required)                      <root>/train/<class>/..., <root>/val/ (or test/)
//   text           (root required)                      a text file or a folder of them (data/text.h)
//   text_classes   /usr/share/games/fortunes            <root>/<class>: fortune files, one class each (data/text_classes.h)
//
// Relative roots are relative to the working directory. With download = true a missing CIFAR
// archive is fetched (download.h); otherwise a missing dataset is an error that says where it
// looked and how to get the data. For the other datasets download is ignored when the files are
// there (a missing one says it cannot be downloaded); the trainer's config refuses it for them.
#include <memory>
#include <string>
#include <string_view>

#include "data/cifar.h"
#include "data/dataset.h"

namespace packrat::data {

struct DatasetSpec {
  std::string name{};            // cifar10 | cifar100 | fashion_mnist | mnist | image_folder | text | text_classes
  std::string root{};            // "" = default_root(name)
  Split split = Split::Train;
  bool download = false;         // cifar10, cifar100: fetch the archive when missing
  std::string label = "fine";    // cifar100: fine | coarse
  int64_t height = 0, width = 0; // image_folder: resize on load (0 = keep)
  int64_t channels = 3;          // image_folder: 3 = RGB, 1 = grey
  bool preload = false;          // image_folder: decode all images at open
  int64_t seq_len = 0;           // text, text_classes: tokens per sample
  std::string url{}, md5{};      // cifar: override the archive URL and its MD5 (mirrors, tests)
};

std::string default_root(std::string_view name);
Split parse_split(std::string_view s);  // "train" | "test" ("val" = test)
std::shared_ptr<Dataset> open_dataset(const DatasetSpec& spec);

}  // namespace packrat::data
