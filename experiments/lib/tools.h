#pragma once
// The trainer's measuring modes, all on synthetic inputs of the dataset's shape (no data files
// needed) with the configured model, store policy and batch size:
//   --memory-report-only   one training step, the memory report written and printed
//   --benchmark STEPS      img/s, peak bytes and saved bytes of STEPS training steps
//   --find-max-batch BYTES the largest batch whose training step fits in BYTES of tensor memory
#include <cstdint>
#include <string>

#include "experiments/lib/config.h"
#include "core/memory_timeline.h"
#include "experiments/lib/memory_report.h"
#include "experiments/lib/json.h"
#include "experiments/lib/session.h"
#include "experiments/lib/train_loop.h"

namespace packrat {

struct DataParallel;  // experiments/lib/distributed_run.h

// The samples GACT's measured estimator allocates its first bits from, where a measurement
// shortens that refresh (a benchmark, the memory report, memory.plan's variance check). Fewer
// give a poorer allocation: on the 24-layer encoder, gact-L1's bits from 1 sample added 0.13 of
// the gradient's sampling variance, from 8 samples 0.0048 (gact-CB2: 0.106 and 0.019).
inline constexpr int64_t kFirstEstimateBatch = 8;

// Writes memory_report.json into config.output.dir and returns the report.
// With a timeline: the device allocator's events over the step are recorded into it, and written as
// memory_timeline.csv and memory_timeline.png (gnuplot: bytes by tag over the events, the phases marked).
MemoryReport memory_report_only(const Config& c, MemoryTimeline* timeline = nullptr);

struct BenchmarkResult {
  double img_per_s = 0;
  int64_t peak_bytes = 0;   // highest total over the timed steps
  int64_t saved_bytes = 0;  // held after the forward of the last step
  // What the FP32 store would hold at the run's precision (its AMP baseline under bf16 / fp16),
  // and without autocast; the precision's name ("fp32", "bf16", ...).
  int64_t saved_fp32_bytes = 0, saved_f32_bytes = 0;
  std::string precision = "fp32";
  int64_t steps = 0, batch_size = 0;
  std::string device;       // where the steps ran ("cpu", "cuda:0")
  double seconds = 0;
  // Per timed step, averaged: the forward, the recompute of checkpoint segments (memory.recompute)
  // and the rest of the backward; their sum is below the step's time by the optimizer update.
  double forward_ms = 0, recompute_ms = 0, backward_ms = 0;
  // Data-parallel (dp given): the reduction's time left after the backward ended, averaged over
  // the timed steps and the ranks, and the number of ranks.
  double exposed_reduce_s = 0;
  double reduce_alone_s = 0;  // the gradient all-reduce alone (after a barrier), median of 5
  double started_in_backward = 0;  // fraction of the gradient bytes whose all-reduce started during the backward
  double completed_in_backward = 0;  // ... and had completed when it ended (hidden whole), over the timed steps
  int64_t ranks = 1;
  // memory.offload: per timed step, averaged: bytes copied each way, the copy streams' busy time,
  // loads whose copy back no prefetch had started, and saves that waited for an older copy out.
  bool offload = false;
  double offload_to_host_bytes = 0, offload_to_device_bytes = 0, copy_busy_ms = 0, synchronous_loads = 0,
         forward_waits = 0;
  // {"img_per_s": X, "peak_bytes": P, "saved_bytes": S, "device": D, "forward_ms": F,
  // "recompute_ms": R, "backward_ms": B, "precision": "bf16", "saved_vs_fp32_store": S / the FP32
  // store's bytes at that precision, "saved_vs_f32": S / f32 training's}, and when data-parallel also
  // "ranks", "threads", "exposed_reduce_s_per_step", "reduce_alone_s", "started_in_backward" and
  // "completed_in_backward"; with offload "offload": {"bytes_to_host", "bytes_to_device",
  // "copy_busy_ms", "synchronous_loads", "forward_waits"} per step
  Json json() const;
  // c's figures before its `steps` timed steps: batch, device, precision.
  static BenchmarkResult before_steps(const Config& c, int64_t steps);
  // Adds a timed step's figures: the peak, the last step's saved bytes, the means over `steps`.
  void add_step(const StepResult& sr);
};

// What a benchmark times, on c's device (a RunDevice of c alive): c's session, GACT's first
// estimate already taken (on kFirstEstimateBatch samples, see benchmark), and this rank's part
// of a synthetic batch waiting on the device; steps time their phases.
struct BenchmarkBed {
  Session session;
  SyntheticBatch batch;
  StepOptions options;
  StepResult step(int64_t i);  // training step i on the batch
};
BenchmarkBed benchmark_bed(const Config& c, DataParallel* dp = nullptr);

// One untimed warm-up step (oneDNN primitive creation, optimizer state), then `steps` timed steps.
// Under GACT's measured estimator (one backward per saved tensor at its first refresh) a step at
// kFirstEstimateBatch comes first when the batch is larger and runs that refresh, as
// --find-max-batch's warm-up does at batch 1; --memory-report-only too.
// With dp: every rank trains on its part (data.batch_size / ranks) of a global synthetic batch,
// gradients all-reduced; img/s counts the global batch.
BenchmarkResult benchmark(const Config& c, int64_t steps, DataParallel* dp = nullptr);

struct MaxBatchResult {
  int64_t batch_size = 0;   // 0: not even batch 1 fits
  int64_t peak_bytes = 0;   // peak total of a step at that batch size
  int64_t limit = 0;
  int64_t trials = 0;
  // GACT sensitivity refreshes the trials ran: 0, because each trial's fresh saved-tensor policy
  // starts from the warm-up step's adaptive state (as a resumed run does), so that a trial
  // measures a training step and not GACT's first-step measurement.
  int64_t refreshes = 0;
  // Steady-state checks of the largest batch: a store that re-allocates its bits every step
  // (actnn-L3) runs a second step there on the same policy; 0 for every other store.
  int64_t confirmations = 0;
};
// Doubles the batch from 1 until a step runs out of memory under the allocator limit `limit`
// (which counts every tagged byte: parameters, optimizer state, data, activations, saved,
// gradients, workspace), then bisects. The model's parameters and optimizer state are made
// before the limit is set, and count towards it.
MaxBatchResult find_max_batch(const Config& c, int64_t limit, int64_t upper = int64_t{1} << 20);

}  // namespace packrat
