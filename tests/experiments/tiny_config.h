#pragma once
// A small trainer config for tests: ResNet-20 on the fixture IDX dataset (tests/experiments/fixture.h).
#include <filesystem>
#include <string>
#include <vector>

#include "experiments/lib/config.h"

namespace packrat::testing {

inline std::string tiny_yaml(const std::filesystem::path& data_root, const std::filesystem::path& out_dir) {
  return "seed: 3\n"
         "data:\n"
         "  dataset: mnist\n"
         "  root: \"" + data_root.string() + "\"\n"
         "  batch_size: 16\n"
         "  eval_batch_size: 32\n"
         "  train_transforms: [\"random_crop(12, 1)\", hflip]\n"
         "model:\n"
         "  arch: resnet20\n"
         "saved_tensors:\n"
         "  default: fp32\n"
         "  rules:\n"
         "    - {ops: [relu], layers: [\"layer2.*\"], scheme: fewbit, bits: 1}\n"
         "optimizer: {name: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 0.0005}\n"
         "schedule: {name: cosine, warmup_epochs: 0.5}\n"
         "train: {epochs: 2, label_smoothing: 0.1, clip_grad_norm: 5}\n"
         "output: {dir: \"" + out_dir.string() + "\"}\n";
}

inline Config tiny_config(const std::filesystem::path& data_root, const std::filesystem::path& out_dir,
                          const std::vector<std::string>& sets = {}) {
  return parse_config(tiny_yaml(data_root, out_dir), "tiny.yaml", sets);
}

inline std::filesystem::path temp_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("packrat_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace packrat::testing
