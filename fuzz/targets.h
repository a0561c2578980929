#pragma once
// The fuzz targets' bodies, shared by the libFuzzer programs (fuzz/<target>_fuzz.cpp) and the
// regression test that replays every crasher found (tests/fuzz/fuzz_regression_test.cpp).
// A hostile input may succeed or throw packrat::Error; any other exception escapes and libFuzzer
// reports it as a crash (the trainer would print "internal error" and exit 1 instead of exit 2
// with a message), and so does any sanitizer report.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/cifar.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/tar.h"
#include "experiments/lib/config.h"
#include "experiments/lib/safetensors.h"

namespace packrat::fuzz {

namespace fs = std::filesystem;

// <tmp>/packrat-fuzz-<pid>: one per fuzzing process, emptied on each input.
inline const fs::path& scratch() {
  static const fs::path dir = [] {
    const char* shm = "/dev/shm";
    const fs::path root = fs::is_directory(shm) ? fs::path(shm) : fs::temp_directory_path();
    return root / ("packrat-fuzz-" + std::to_string(::getpid()));
  }();
  return dir;
}

inline fs::path fresh_scratch() {
  std::error_code ec;
  fs::remove_all(scratch(), ec);
  fs::create_directories(scratch());
  return scratch();
}

inline void write_input(const fs::path& file, const uint8_t* data, size_t size) {
  fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// Runs fn; a packrat::Error is an accepted answer to a bad input.
template <class Fn>
void expect_error_or_success(Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
  }
}


// The config parser with --set overrides: input = YAML text, then '\0'-separated overrides.
inline void config_target(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find('\0');
  const std::string yaml = in.substr(0, cut);
  std::vector<std::string> overrides;
  for (size_t pos = cut; pos != std::string::npos && pos < in.size();) {
    const size_t next = in.find('\0', pos + 1);
    overrides.push_back(in.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1));
    pos = next;
  }
  expect_error_or_success([&] {
    const Config c = parse_config(yaml, "fuzz.yaml", overrides);
    // What the trainer writes into the run directory must read back.
    parse_config(config_to_yaml(c), "fuzz resolved config.yaml");
  });
}

// The IDX reader (plain and gzipped): images (rank 3) and labels (rank 1).
inline void idx_target(const uint8_t* data, size_t size) {
  const auto file = fresh_scratch() / "input-idx3-ubyte";
  write_input(file, data, size);
  for (int rank : {1, 3}) expect_error_or_success([&] { data::read_idx(file, rank, "fuzz"); });
}

// The CIFAR-10 and CIFAR-100 binary readers and their class-name files: the input is the test
// batch and, from its first 256 bytes, the label-name text.
inline void cifar_target(const uint8_t* data, size_t size) {
  const auto dir = fresh_scratch();
  write_input(dir / "test_batch.bin", data, size);
  write_input(dir / "test.bin", data, size);
  const size_t text = size < 256 ? size : 256;
  for (const char* f : {"batches.meta.txt", "fine_label_names.txt", "coarse_label_names.txt"}) write_input(dir / f, data, text);
  expect_error_or_success([&] { data::load_cifar10(dir, data::Split::Test); });
  expect_error_or_success([&] { data::load_cifar100(dir, data::Split::Test, data::Cifar100Label::Fine); });
  expect_error_or_success([&] { data::load_cifar100(dir, data::Split::Test, data::Cifar100Label::Coarse); });
  expect_error_or_success([&] { data::cifar10_class_names(dir); });
  expect_error_or_success([&] { data::cifar100_class_names(dir, data::Cifar100Label::Fine); });
}

// The image-folder reader: one image file (PNG, JPEG, BMP, ... through stb_image) in a class
// folder, decoded as is, as grey and resized; then the folder opened with preload.
inline void image_folder_target(const uint8_t* data, size_t size) {
  const auto root = fresh_scratch();
  const auto file = root / "cat" / "a.png";
  write_input(file, data, size);
  data::ImageShape shape;
  expect_error_or_success([&] { data::decode_image(file, 3, 0, 0, shape); });
  expect_error_or_success([&] { data::decode_image(file, 1, 7, 5, shape); });
  expect_error_or_success([&] {
    data::ImageFolderDataset ds(root, {.height = 8, .width = 8, .channels = 3, .preload = true}, "fuzz");
  });
}

// The safetensors reader (checkpoints): header length, JSON header, offsets, dtypes.
inline void safetensors_target(const uint8_t* data, size_t size) {
  const auto file = fresh_scratch() / "input.safetensors";
  write_input(file, data, size);
  expect_error_or_success([&] { read_safetensors(file.string()); });
}

// The tar/gzip reader (dataset downloads): the input is unpacked into out/inside, and nothing
// may appear anywhere else.
inline void tar_target(const uint8_t* data, size_t size) {
  const auto dir = fresh_scratch();
  write_input(dir / "input.tar.gz", data, size);
  expect_error_or_success([&] { data::extract_tar_gz(dir / "input.tar.gz", dir / "out" / "inside"); });
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir)) found.push_back(e.path().filename());
  if (fs::exists(dir / "out"))
    for (const auto& e : fs::directory_iterator(dir / "out")) found.push_back("out" / e.path().filename());
  for (const fs::path& f : found)
    if (f != "input.tar.gz" && f != "out" && f != "out/inside")
      throw std::logic_error("tar: an archive member was written outside the destination: " + f.string());
}

}  // namespace packrat::fuzz
