#pragma once
// Training checkpoints as safetensors with PyTorch-style names:
//   model.<param or buffer>        e.g. model.layer1.0.conv1.weight, model.bn1.running_mean
//   optimizer.<state>              the optimizer's state dict, e.g. optimizer.momentum_buffer.fc.weight,
//                                  optimizer.step
//   trainer.epoch, trainer.step    epochs and global steps completed (i64 scalars)
//   trainer.rng                    (seed, epoch, step) as i64: every random draw of a run (init,
//                                  shuffle, augmentation, stochastic rounding) is keyed by these
//   trainer.masks.<module>         (index, calls) as i64 for each mask stream of the model
//                                  (Module::named_mask_streams: Dropout, StochasticDepth, attention
//                                  dropout): the masks of the next training forwards are keyed by them
//   trainer.loss_scale             fp16 runs only: (scale) f64 and trainer.loss_scale_steps (good
//                                  steps in a row, steps skipped) i64, the GradScaler's state
//   <state>.stores                 runs with stores that adapt across steps only (GACT: gact.stores):
//   <state>.<i>.<entry>            how many (i64 scalar), and per store i its state
//                                  (SavedTensorStore::export_state; GACT's: sensitivity, bits, ..)
// and metadata {"format": "pt", "arch": .., "epoch": .., "step": ..}. In PyTorch:
//   sd = {k[6:]: v for k, v in safetensors.torch.load_file(p).items() if k.startswith("model.")}
// Files are <run>/checkpoints/epoch_0003.safetensors, written atomically.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "layers/module.h"
#include "autograd/saved_tensor_store.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace packrat {

// A checkpoint's trainer.epoch is at most train.epochs' maximum; trainer.step at most 2^53.
constexpr int64_t kMaxCheckpointEpoch = 100000;
constexpr int64_t kMaxCheckpointStep = int64_t{1} << 53;

struct TrainingPosition {
  int64_t epoch = 0;  // epochs completed
  int64_t step = 0;   // global training steps completed
  uint64_t seed = 0;
};

std::string checkpoint_path(const std::string& run_dir, int64_t epoch);
void save_checkpoint(const std::string& path, const Module& model, const Optimizer& opt, const TrainingPosition& pos,
                     const std::string& arch, const std::vector<SavedTensorStore*>& stores = {},
                     const GradScaler* scaler = nullptr);
// Checks first that the checkpoint is one a run can have written (throws packrat::Error naming
// the file and the entry otherwise): every f32/f64 value finite, trainer.epoch in
// [0, kMaxCheckpointEpoch], trainer.step in [0, kMaxCheckpointStep], trainer.rng and the
// file name agreeing with them. Then restores model parameters and buffers (exact names and shapes; a missing or extra tensor is an
// error naming it), the mask streams (a missing or extra one is an error naming it; a checkpoint
// without any, written before packrat saved them, loads with a warning: the masks then differ
// from the uninterrupted run's), the optimizer state and the state of the adaptive `stores`
// (experiments/lib/checkpoint_stores.h: each store checks its own, e.g. GACT's sizes against the
// model, and what it restored against the first step: check_restored_step), and the loss scaler's
// (an fp16 run resuming a checkpoint without one, or the reverse, is an error); returns the position.
TrainingPosition load_checkpoint(const std::string& path, Module& model, Optimizer& opt,
                                 const std::vector<SavedTensorStore*>& stores = {}, GradScaler* scaler = nullptr);
// The epoch of a checkpoint file name "epoch_0003.safetensors" (1 to 9 digits); nullopt otherwise.
std::optional<int64_t> checkpoint_epoch(const std::string& filename);
// The checkpoint of the highest epoch in <run_dir>/checkpoints, if any.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

}  // namespace packrat
