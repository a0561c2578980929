// Writes the fuzzers' seed corpora, <out>/<target>/*, from the test fixtures: the shipped configs
// and the tests' tiny config with overrides, IDX, CIFAR, image and tar files as the data tests make
// them, and a checkpoint-like safetensors file.
//   fuzz_seeds <out> <source dir>
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb_image_write.h>
#pragma GCC diagnostic pop

#include <fstream>
#include <sstream>

#include "core/tensor.h"
#include "experiments/lib/safetensors.h"
#include "tests/data/fixtures.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::data::testing;

namespace {

void put(const fs::path& f, const std::string& s) { write_text(f, s); }

std::string slurp(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string gz_of(const std::vector<uint8_t>& bytes, const fs::path& scratch) {
  write_gz(scratch, bytes);
  return slurp(scratch);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_seeds <out> <source dir>\n");
    return 2;
  }
  const fs::path out = argv[1], src = argv[2];
  fs::create_directories(out);

  // config: YAML, then '\0'-separated --set overrides.
  for (const auto& e : fs::directory_iterator(src / "configs")) put(out / "config" / e.path().filename(), slurp(e.path()));
  const std::string tiny = testing::tiny_yaml("/nonexistent", "/tmp/unused");
  put(out / "config" / "tiny.yaml", tiny);
  put(out / "config" / "tiny_sets.yaml", tiny + std::string(1, '\0') + "data.batch_size=8" + std::string(1, '\0') +
                                             "saved_tensors.rules[0].bits=2" + std::string(1, '\0') +
                                             "saved_tensors.default={scheme: fp32}");

  // idx: labels (rank 1) and images (rank 3), plain and gzipped.
  const auto labels = idx_bytes({4}, {0, 1, 2, 3});
  std::vector<uint8_t> px(2 * 3 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 13);
  const auto images = idx_bytes({2, 3, 3}, px);
  put(out / "idx" / "labels", std::string(labels.begin(), labels.end()));
  put(out / "idx" / "images", std::string(images.begin(), images.end()));
  put(out / "idx" / "images.gz", gz_of(images, out / "scratch.gz"));

  // cifar: records with one label byte (CIFAR-10) and with two (CIFAR-100).
  const auto c10 = cifar_records({{1}, {2}});
  const auto c100 = cifar_records({{1, 11}, {2, 22}});
  put(out / "cifar" / "cifar10", std::string(c10.begin(), c10.end()));
  put(out / "cifar" / "cifar100", std::string(c100.begin(), c100.end()));

  // image_folder: small PNG and BMP images.
  std::vector<uint8_t> hwc(5 * 4 * 3);
  for (size_t i = 0; i < hwc.size(); ++i) hwc[i] = static_cast<uint8_t>(i * 7);
  fs::create_directories(out / "image_folder");
  stbi_write_png((out / "image_folder" / "a.png").c_str(), 4, 5, 3, hwc.data(), 4 * 3);
  stbi_write_png((out / "image_folder" / "grey.png").c_str(), 4, 5, 1, hwc.data(), 4);
  stbi_write_bmp((out / "image_folder" / "a.bmp").c_str(), 4, 5, 3, hwc.data());
  stbi_write_jpg((out / "image_folder" / "a.jpg").c_str(), 4, 5, 3, hwc.data(), 90);

  // tar: the archive the download tests unpack, gzipped and plain.
  const auto tar = tar_bytes({{"cifar-10-batches-bin/", ""},
                              {"cifar-10-batches-bin/test_batch.bin", std::string(c10.begin(), c10.end())},
                              {"cifar-10-batches-bin/" + std::string(110, 'n') + "/long.txt", "long"},
                              {"cifar-10-batches-bin/link", "", '2'}});
  put(out / "tar" / "cifar.tar", std::string(tar.begin(), tar.end()));
  put(out / "tar" / "cifar.tar.gz", gz_of(tar, out / "scratch.gz"));

  // safetensors: a checkpoint-like file with metadata and several dtypes.
  fs::create_directories(out / "safetensors");
  write_safetensors((out / "safetensors" / "ckpt.safetensors").string(),
                    {{"conv.weight", Tensor::from_vector({2, 1, 1, 2}, std::vector<float>{1, 2, 3, 4})},
                     {"fc.bias", Tensor::from_vector({3}, std::vector<float>{0.5f, -1, 2})}},
                    {{"epoch", "3"}, {"arch", "resnet20"}});
  fs::remove(out / "scratch.gz");
  return 0;
}
