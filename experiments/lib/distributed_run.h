#pragma once
// The trainer under mpirun: `mpirun -np 4 trainer --config X.yaml` trains one model
// data-parallel (docs/distributed.md). This file holds what the trainer adds for it:
// starting the world (threads per rank, the check that every rank resolved the same config,
// data.batch_size split over the ranks), the training step's gradient all-reduce and GACT
// broadcast (StepSync), synchronised batchnorm, the parameter broadcast at start, and the
// reductions of metrics and memory reports to rank 0, which alone writes the run directory.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "distributed/gradient_reducer.h"
#include "experiments/lib/config.h"
#include "experiments/lib/memory_report.h"
#include "experiments/lib/step_sync.h"
#include "layers/module.h"

namespace packrat {

struct DataParallel {
  std::unique_ptr<dist::Communicator> comm;
  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }
  bool root() const { return comm->rank() == 0; }
};

// Whether this trainer process runs data-parallel: started by mpirun/mpiexec.
bool data_parallel_requested();

// Starts the world for `c` (distributed.backend, distributed.timeout_s), then on every rank:
// checks that all ranks resolved the same config (a hash of config_to_yaml; an error names the
// ranks that differ and the first differing line), that data.batch_size divides by the number of
// ranks, and chooses the OpenMP threads per rank (threads > 0 in the config wins; otherwise the
// host's processors divided by the ranks on the host, at least 1), which it logs. Returns the
// config the rank trains with (threads resolved).
std::unique_ptr<DataParallel> start_data_parallel(const Config& c, Config& resolved);

// Threads per rank for `ranks_on_host` ranks on a host with `host_processors` processors when
// this process may use `usable_processors` (its affinity mask): never more in total than the host has.
int threads_per_rank(int host_processors, int usable_processors, int ranks_on_host);

// Every parameter and buffer from rank 0 (the ranks start identical whatever their seeds did).
void broadcast_model(DataParallel& dp, Module& model);

// sum over ranks, in place (metrics: loss sums, counts).
void sum_over_ranks(DataParallel& dp, std::vector<double>& values, std::string_view what);

// The training step's StepSync: gradients through a GradientReducer, GACT's state from rank 0.
class DataParallelStep : public StepSync {
 public:
  DataParallelStep(DataParallel& dp, Module& model, const DistributedConfig& c);
  void before_backward(int64_t local, int64_t global) override;
  void after_backward() override;
  void abandon() override;
  void after_store_refresh(SavedTensorStore& store) override;
  const dist::ReducerTiming& timing() const { return reducer_.timing(); }
  double time_reduction_alone() { return reducer_.time_reduction_alone(); }

 private:
  DataParallel& dp_;
  dist::GradientReducer reducer_;
};

// While alive (distributed.sync_batchnorm), batchnorm normalises with the global batch's statistics.
class SyncBatchnormScope {
 public:
  SyncBatchnormScope(DataParallel& dp, bool enabled);
  ~SyncBatchnormScope();
  SyncBatchnormScope(const SyncBatchnormScope&) = delete;
  SyncBatchnormScope& operator=(const SyncBatchnormScope&) = delete;

 private:
  bool enabled_;
};

// A training session's data-parallel parts, for the trainer and --benchmark alike: the model
// broadcast from rank 0, the gradient reducer, synchronised batchnorm when configured. Without
// `dp` (one process) it holds nothing and step() is null.
class DataParallelSession {
 public:
  DataParallelSession(DataParallel* dp, Module& model, const DistributedConfig& c);
  DataParallelStep* step() const { return step_.get(); }  // StepOptions::sync

 private:
  std::unique_ptr<DataParallelStep> step_;
  std::optional<SyncBatchnormScope> sync_bn_;
};

// Every rank's report of the first step, gathered on rank 0: one row per rank (batch, saved bytes
// from the stores and from the allocator, peak bytes, peak per tag). Rank 0 writes
// <dir>/memory_report_ranks.json and returns the table; other ranks get "".
std::string gather_memory_reports(DataParallel& dp, const MemoryReport& mine, const std::string& dir);

}  // namespace packrat
