#pragma once
// Training checkpoints as safetensors with PyTorch-style names:
//   model.<param or buffer>        e.g. model.layer1.0.conv1.weight, model.bn1.running_mean
//   optimizer.<state>              the optimizer's state dict, e.g. optimizer.momentum_buffer.fc.weight,
//                                  optimizer.step
//   trainer.epoch, trainer.step    epochs and global steps completed (i64 scalars)
//   trainer.rng                    (seed, epoch, step) as i64: every random draw of a run (init,
//                                  shuffle, augmentation, stochastic rounding) is keyed by these
// and metadata {"format": "pt", "arch": .., "epoch": .., "step": ..}. In PyTorch:
//   sd = {k[6:]: v for k, v in safetensors.torch.load_file(p).items() if k.startswith("model.")}
// Files are <run>/checkpoints/epoch_0003.safetensors, written atomically.
#include <cstdint>
#include <optional>
#include <string>

#include "layers/module.h"
#include "optim/optimizer.h"

namespace packrat {

struct TrainingPosition {
  int64_t epoch = 0;  // epochs completed
  int64_t step = 0;   // global training steps completed
  uint64_t seed = 0;
};

std::string checkpoint_path(const std::string& run_dir, int64_t epoch);
void save_checkpoint(const std::string& path, const Module& model, const Optimizer& opt, const TrainingPosition& pos,
                     const std::string& arch);
// Restores model parameters and buffers (exact names and shapes; a missing or extra tensor is an
// error naming it) and the optimizer state; returns the position.
TrainingPosition load_checkpoint(const std::string& path, Module& model, Optimizer& opt);
// The checkpoint of the highest epoch in <run_dir>/checkpoints, if any.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

}  // namespace packrat
