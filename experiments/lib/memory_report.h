#pragma once
// The memory report of one training step: every saved tensor (layer, op, scheme, bits, bytes
// really held, the FP32 bytes it replaces), totals per layer and overall, and the peak bytes
// per allocator tag over the step. Printed as a table and written as memory_report.json:
//   {"device": "cpu", "batch_size": N, "totals": {"saved_bytes": B, "saved_fp32_bytes": B32, "peak_bytes": P,
//    "peak_by_tag": {"Parameter": .., ...}, ...}, "layers": [...], "tensors": [{"layer": ..,
//    "op": .., "scheme": .., "bits": .., "bytes": .., "fp32_bytes": ..}, ...]}
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/saved_tensor_store.h"
#include "core/allocator.h"
#include "experiments/lib/json.h"
#include "experiments/lib/train_loop.h"

namespace packrat {

struct LayerTotals {
  std::string layer;
  int64_t tensors = 0, bytes = 0, fp32_bytes = 0;
};

struct MemoryReport {
  int64_t batch_size = 0;
  bool synthetic = false;            // the step ran on synthetic inputs of the data's shape (--memory-report-only)
  std::vector<SavedRecord> tensors;  // live saved tensors after the forward, in order of saving
  int64_t saved_bytes = 0;           // sum of tensors[].bytes
  int64_t saved_fp32_bytes = 0;      // sum of tensors[].fp32_bytes: the FP32 store at the run's precision
  int64_t saved_f32_bytes = 0;       // sum of tensors[].f32_bytes: ... without autocast
  DType precision = DType::f32;      // the autocast dtype the step ran under (f32: none)
  int64_t allocator_saved_bytes = 0; // the allocator's Saved tag at the same moment
  MemoryStats step;                  // peaks over the whole step (forward, backward, update), and its device
  // Recomputation (memory.recompute): the modules run as checkpoint segments, what their
  // recompute phase cost in the step (time, the device's peak total while a segment was
  // recomputed and its backward ran), and the step's forward and backward time.
  std::vector<std::string> recomputed;
  RecomputeStats recompute;
  double forward_s = 0, backward_s = 0;
  // memory.offload: the saved bytes on the device and in the host pool, per layer, after the
  // forward; the host's peak and pool; what moved each way (offload.on false: no offload).
  OffloadStep offload;

  std::vector<LayerTotals> per_layer() const;  // in order of first appearance
  // The same per op kind (conv2d, batchnorm2d, relu, ...; LayerTotals::layer holds the op), in
  // order of first appearance. Its fp32_bytes follow the records' once-per-buffer count, so a
  // convolution whose input is its ReLU's output has them at the ReLU: compare bytes only.
  std::vector<LayerTotals> per_op() const;
  // Saved bytes per scheme name (fp32, fewbit, actnn, ...), sorted by name; of one op kind's
  // tensors only when `op` is given (`checkpoint`: the recomputed segments' kept inputs).
  std::vector<std::pair<std::string, int64_t>> per_scheme(std::string_view op = {}) const;
};

// Builds the report from the policy's records (taken after the forward) and the step's stats;
// its precision is the thread's autocast dtype.
MemoryReport make_memory_report(int64_t batch_size, std::vector<SavedRecord> records, int64_t allocator_saved_bytes,
                                const MemoryStats& step);
// The report of a train_step that captured its records (moved out of it), with the modules that
// ran as checkpoint segments.
MemoryReport make_memory_report(int64_t batch_size, StepResult& step, const std::vector<std::string>& recomputed);

Json memory_report_json(const MemoryReport& r);
std::string memory_report_table(const MemoryReport& r);  // per tensor, per layer, overall, peaks
// Writes memory_report.json (atomically) and saved_by_scheme.tsv (for plot_runs.sh) into dir.
void write_memory_report(const MemoryReport& r, const std::string& dir);

std::string format_bytes(int64_t bytes);  // "1.50 MiB"

}  // namespace packrat
