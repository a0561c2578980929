#pragma once
// One training step, shared by the trainer, --benchmark, --memory-report-only and
// --find-max-batch; evaluation; synthetic batches of a dataset's shape.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/offload/offloader.h"
#include "autograd/saved_tensor_store.h"
#include "core/allocator.h"
#include "core/tensor.h"
#include "data/loader.h"
#include "experiments/lib/step_sync.h"
#include "layers/module.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace packrat {

struct StepOptions {
  double label_smoothing = 0;
  double clip_grad_norm = 0;   // 0: off
  bool capture_saved = false;  // take the policy's records after the forward (memory report)
  StepSync* sync = nullptr;    // data-parallel: gradient all-reduce, GACT broadcast (step_sync.h)
  int64_t global_count = 0;    // data-parallel: labels of the global batch (as StepResult::count; 0: this batch's)
  bool time_phases = false;    // wait for the device after the backward, so that backward_s is its time
  // fp16: the loss scaled before backward, the gradients unscaled after; a step with an inf or
  // NaN gradient skipped (optim/grad_scaler.h).
  GradScaler* scaler = nullptr;
  // Called with the model after the backward, before the gradients are checked and used (tests
  // inject a non-finite gradient here).
  std::function<void(Module&)> after_backward;
  // --find-max-batch's trials measure memory: a non-finite loss (ResNet-50 at batch 1 under 2-bit
  // storage, its batchnorms over 2x2 maps amplifying the codes' noise) does not end them.
  bool allow_non_finite_loss = false;
};

// With memory.offload (autograd/offload/): where the step's saved bytes lay after the forward, once
// its copies to the host were done (taken with capture_saved), and what moved over the step.
struct OffloadStep {
  bool on = false;
  std::map<std::string, int64_t> device_by_layer, host_by_layer;  // Saved bytes per layer (capture_saved)
  int64_t device_saved = 0, host_saved = 0;                       // ... their totals
  int64_t host_peak = 0;        // the host pool's Saved peak over the step
  int64_t host_pool_bytes = 0;  // the pool's blocks after the step, in use and cached: page-locked memory held
  int64_t pageable_bytes = 0;   // ... of them from the ordinary heap (page-locked memory refused)
  OffloadStats moved;           // bytes each way, loads prefetched or not, the copy streams' busy time
};

struct StepResult {
  double loss = 0;
  int64_t correct = 0, count = 0;       // count: the labels the loss averages (count_correct)
  double grad_norm = 0;                 // before clipping (0 when clipping is off)
  bool skipped = false;                 // fp16: an inf / NaN gradient, no update (GradScaler)
  std::vector<SavedRecord> saved;       // live saved tensors after the forward (capture_saved)
  int64_t saved_allocator_bytes = 0;    // Allocator Saved bytes at that moment, minus those before the step
  int64_t saved_record_bytes = 0;       // sum of the records' bytes (always taken)
  int64_t saved_record_fp32_bytes = 0;  // ... of their fp32_bytes (the FP32 store at the run's precision)
  int64_t saved_record_f32_bytes = 0;   // ... of their f32_bytes (without autocast)
  MemoryStats memory;                   // after the step; peaks cover the whole step
  // Wall time of the forward (up to the loss on the host) and of the backward, whose part spent
  // running checkpoint segments' forwards again is recompute.recompute_s (autograd/checkpoint.h;
  // on a GPU the backward is timed to its end only with StepOptions::time_phases).
  double forward_s = 0, backward_s = 0;
  RecomputeStats recompute;
  OffloadStep offload;
};

// The device the model's parameters live on (the DeviceScope's for a model without any).
Device model_device(const Module& model);

// images and labels (a host batch, or already on the model's device) are copied to the model's
// device (tag Data; from page-locked memory the copy is asynchronous), then:
// forward, loss = cross_entropy(logits, labels, label_smoothing) (task_loss: token models too), backward, (clip), optimizer
// step, for global step `step` under `policy` (policy.begin_step(step) first). Resets the
// allocator's peaks at the start. A non-finite loss releases the step's saved tensors and
// throws packrat::Error naming the step and what to try.
StepResult train_step(Module& model, Optimizer& opt, StorePolicy& policy, const Tensor& images, const Tensor& labels,
                      int64_t step, const StepOptions& o);

// Loss (mean, no label smoothing) and accuracy of the model in eval mode over one pass of
// `loader` (no gradients recorded).
struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t count = 0;
};
EvalResult evaluate(Module& model, data::Loader& loader, int64_t epoch);

// Argmax hits of logits (N, C) against labels (N) i64, or (N, T, V) against (N, T), among the
// labels counted: every one but those of -100 (data::kIgnoreTarget: masked-language-model
// positions not chosen, which the loss ignores too).
struct Hits {
  int64_t correct = 0, count = 0;
};
Hits count_correct(const Tensor& logits, const Tensor& labels);

// Random inputs (N, C, H, W) ~ N(0, 1) and labels in [0, classes), tagged Data, from Philox(seed),
// on the host.
struct SyntheticBatch {
  Tensor images, labels;
};
SyntheticBatch synthetic_batch(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed);

}  // namespace packrat
