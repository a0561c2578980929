#pragma once
// train.init_from: a fresh run's model starts from a checkpoint of another run (fine-tuning, e.g.
// an encoder pretrained with train.task: mlm, then trained on text_classes with another head).
//
//   source    a checkpoint file the trainer wrote (checkpoint.h), or a run directory: its latest
//             checkpoint.
//   loaded    every parameter and buffer of the model whose name (model.<name> in the file) and
//             shape match one of the checkpoint's is copied from it, bit for bit; the others keep
//             their fresh initialisation. Nothing else is read: the optimizer starts afresh, the
//             run at epoch 0, step 0, and the stores (GACT) with no state.
//   errors    packrat::Error naming the key and the file: a missing file or run directory without
//             checkpoints, a corrupt file, one without model tensors, a name in both with another
//             shape (naming the tensor and both shapes) or element type, a non-finite value in a
//             tensor it would load, and no parameter matching at all.
//   --resume  a resumed run continues from its own checkpoint, which already holds what init_from
//             gave it and what training made of that: init_from is not applied again (nor read).
#include <cstdint>
#include <string>
#include <vector>

#include "layers/module.h"

namespace packrat {

struct InitFromResult {
  std::string path;                     // the checkpoint file read
  int64_t params = 0, loaded_params = 0;
  int64_t buffers = 0, loaded_buffers = 0;
  std::vector<std::string> skipped;     // the model's parameters and buffers the file does not have
  std::vector<std::string> unused;      // the file's model tensors the model does not have
  // "init_from PATH: loaded N of M parameters (skipped: a, b)", then the buffers and the
  // checkpoint's tensors left unused when there are any.
  std::string summary() const;
};

// Loads as described above; `key` names the setting in errors ("q.yaml: train.init_from").
InitFromResult init_from_checkpoint(const std::string& source, Module& model, const std::string& key);

}  // namespace packrat
