#pragma once
// Recomputation (gradient checkpointing) on the tape. checkpoint(segment, inputs) runs the
// segment's forward without recording its inner nodes and records one node, op "checkpoint",
// under the current layer (the segment's module name), that keeps only the segment's inputs,
// through the store: a compressing policy compresses them like any other saved tensor (rules
// may name the op `checkpoint`). Its backward runs the segment's forward again with recording on,
// so that the inner saves go through the store as the rules say, then the inner nodes' backward,
// releasing each inner handle as soon as it is used; the gradients land where they would have
// without recomputation, and the gradient-ready hook fires in the same order.
//
// Identical to a run without recomputation, given the same inputs: the ops are the same, the
// batchnorm running statistics are updated once (the update is skipped while recomputing()),
// and random masks are the same when the segment replays its mask streams (Module does:
// layers/module.h). With the FP32 store the loss and the gradients are the same bits.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace packrat {

// A segment: the same inputs give the same outputs, every time it runs. It must outlive the
// backward of the step that runs it (a module's forward: the model outlives its steps).
using Segment = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// Outputs of segment(inputs). Records the checkpoint node when any input requires grad or the
// segment reads a parameter that does; otherwise (grad off, evaluation) it only runs the segment.
std::vector<Tensor> checkpoint(const Segment& segment, const std::vector<Tensor>& inputs);
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& segment, const Tensor& input);

// True while a segment runs its forward a second time, in backward.
bool recomputing();
// While recomputing(): a number for the segment being run again (the innermost), unique on this
// thread, so that a store can tell the tensors each recompute saves; 0 otherwise. The tensors a
// recompute saves are held only for its segment's backward (GACT budgets their bits apart).
uint64_t recompute_serial();

// What recomputation cost on this thread since reset_recompute_stats(), for reports.
struct RecomputeStats {
  int64_t recomputes = 0;     // segments run a second time
  double recompute_s = 0;     // wall time of those second forwards (their backward excluded)
  // The device allocator's highest total (every tag) while a segment was recomputed and its
  // inner backward ran.
  int64_t peak_bytes = 0;
};
const RecomputeStats& recompute_stats();
void reset_recompute_stats();

}  // namespace packrat
