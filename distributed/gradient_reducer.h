#pragma once
// Data-parallel gradient averaging overlapped with the backward pass. The parameters are cut
// into buckets of about bucket_bytes, in reverse order of registration (roughly the order in
// which the backward finishes them). The tape calls back when a parameter's gradient is final
// (set_gradient_ready_hook); the reducer copies it, scaled by this process's share of the
// batch, into its bucket, and starts the bucket's nonblocking all-reduce as soon as the bucket
// is full, while the backward goes on. finish() starts what is left, waits, and writes
//   grad = sum_r share_r * grad_r
// (the gradient of the global batch's mean loss) into every parameter's gradient.
//
// Buckets start strictly in index order, so every process issues the same collectives in the
// same order whatever its timing. A parameter no gradient reached stays without one (every
// process runs the same graph, so it is the same parameter everywhere).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "distributed/communicator.h"

namespace packrat::dist {

struct ReducerOptions {
  int64_t bucket_bytes = int64_t{1} << 20;  // distributed.bucket_bytes
  bool overlap = true;  // false: every bucket is reduced after the backward (for comparison)
};

// Time of the last step's reduction, for the benchmark.
struct ReducerTiming {
  double exposed_s = 0;            // finish(): waiting for reductions after the backward ended
  int64_t buckets = 0;             // buckets reduced
  int64_t started_in_backward = 0; // of which started before the backward ended
  int64_t bytes = 0;               // f32 bytes reduced
  int64_t bytes_started_in_backward = 0;
  // f32 bytes whose all-reduce had completed when the backward ended: reductions hidden whole
  // behind it (a lower bound of the hidden part, which does not depend on the ranks' skew).
  int64_t bytes_completed_in_backward = 0;
};

class GradientReducer {
 public:
  // params: every trainable parameter, in registration order; buckets are Gradient-tagged
  // buffers of the allocator, held for the reducer's life.
  GradientReducer(Communicator& comm, std::vector<Tensor> params, ReducerOptions o = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Before the backward: installs the tape hook; share = this process's samples / global batch.
  void begin(double share);
  // After the backward: completes every bucket and writes the averaged gradients; removes the hook.
  void finish();
  // Removes the hook and forgets the step (after an exception in the backward).
  void abandon();

  const ReducerTiming& timing() const { return timing_; }
  // The reduction alone, for the benchmark: after a barrier (no rank waits for another's
  // backward), every bucket started and waited for; seconds. Outside a step (scratch contents).
  double time_reduction_alone();
  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offset;  // of each parameter in `flat`
    Tensor flat;                  // (numel) f32, Gradient
    int64_t missing = 0;          // parameters not yet copied in this step
    std::unique_ptr<PendingReduce> pending;
    bool started = false;
  };
  void on_ready(size_t param);
  void copy_in(size_t param);
  void start_ready_buckets();  // in index order, while the next one is full

  Communicator& comm_;
  std::vector<Tensor> params_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;                 // per parameter
  std::vector<int64_t> offset_of_;                // per parameter, in its bucket
  std::vector<bool> copied_;                      // per parameter, this step
  std::unordered_map<const void*, size_t> index_; // AutogradMeta* -> parameter
  size_t next_start_ = 0;
  std::chrono::steady_clock::time_point last_progress_{};
  double share_ = 1;
  bool active_ = false;
  ReducerTiming timing_;
};

}  // namespace packrat::dist
