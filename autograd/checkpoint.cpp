#include "autograd/checkpoint.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "autograd/saving_op_kinds.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/autocast.h"

namespace packrat {

PACKRAT_SAVING_OP_KINDS("checkpoint")

namespace {

thread_local uint64_t t_serial = 0;         // recompute_serial(); 0: not recomputing
thread_local uint64_t t_serials_given = 0;  // recomputes begun on this thread
thread_local RecomputeStats t_stats;

// recompute_serial() (and so recomputing()) for a scope; nested segments restore the outer value.
class RecomputeScope {
 public:
  RecomputeScope() : previous_(t_serial) { t_serial = ++t_serials_given; }
  ~RecomputeScope() { t_serial = previous_; }

 private:
  uint64_t previous_;
};

// The peak of the device's total over a segment's recompute and inner backward, kept as the
// thread's recompute peak; a nested segment's window gives the outer one back what it ended.
class RecomputeWindow {
 public:
  explicit RecomputeWindow(Device device) : alloc_(Allocator::of(device)), outer_peak_(alloc_.restart_window()) {}
  ~RecomputeWindow() {
    const int64_t peak = alloc_.restart_window();
    t_stats.peak_bytes = std::max(t_stats.peak_bytes, peak);
    alloc_.raise_window(std::max(outer_peak_, peak));
  }

 private:
  Allocator& alloc_;
  int64_t outer_peak_;
};

// The checkpoint node's backward. grads[k]: the gradient of outputs[differentiable[k]].
// input_dtypes[i]: inputs[i]'s dtype in the forward, which its load keeps (a compressing store
// decodes to f32 otherwise), so that the recompute runs in the forward's dtypes.
std::vector<Tensor> recompute_backward(const Segment& segment, Node& self, const std::vector<Tensor>& grads,
                                       const std::vector<DType>& input_dtypes, const std::vector<size_t>& differentiable) {
  const size_t n_inputs = input_dtypes.size();
  // The inner nodes take the inputs' gradients in place, as they would without recomputation:
  // this node holds no reference to them.
  for (Tensor& t : self.grads_so_far) t = Tensor();
  std::vector<Tensor> inputs(n_inputs);  // as saved, under the original inputs' gradient slots
  Device device = Device::cpu();
  for (size_t i = 0; i < n_inputs; ++i) {
    if (!self.saved[i].valid()) continue;
    inputs[i] = self.load(i, input_dtypes[i]).detached();
    if (self.inputs[i]) inputs[i].autograd_meta() = self.inputs[i];
    device = inputs[i].device();
  }
  RecomputeWindow window(device);
  const size_t mark = tape_size();
  std::vector<Tensor> outputs;
  {
    RecomputeScope recomputing;
    EnableGradScope grad;
    TagScope tag(MemTag::Activation);
    const auto start = std::chrono::steady_clock::now();
    outputs = segment(inputs);
    t_stats.recompute_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++t_stats.recomputes;
  }
  inputs.clear();
  std::vector<std::shared_ptr<Node>> inner = take_tape_since(mark);
  PACKRAT_CHECK(!differentiable.empty() && differentiable.back() < outputs.size(),
                "{}: the segment returned {} outputs in its recompute, more before", self.where(), outputs.size());
  // The outputs' gradient slots take the incoming gradients; their buffers can go (the inner
  // nodes keep what they need through the store).
  std::vector<std::shared_ptr<AutogradMeta>> slots;
  for (size_t k = 0; k < grads.size(); ++k) {
    const Tensor& y = outputs[differentiable[k]];
    if (!grads[k].defined() || !y.defined() || !y.requires_grad()) continue;
    slots.push_back(y.autograd_meta());
    TagScope tag(MemTag::Gradient);
    accumulate_into(slots.back()->grad, grads[k]);
  }
  outputs.clear();
  backward_nested(self, std::move(inner));
  return std::vector<Tensor>(self.inputs.size());  // every gradient has landed already
}

}  // namespace

bool recomputing() { return t_serial != 0; }
uint64_t recompute_serial() { return t_serial; }
const RecomputeStats& recompute_stats() { return t_stats; }
void reset_recompute_stats() { t_stats = RecomputeStats{}; }

std::vector<Tensor> checkpoint(const Segment& segment, const std::vector<Tensor>& inputs) {
  // Grad off (evaluation), or inside another segment's unrecorded forward (whose scope collects
  // the parameters read here): the segment only runs.
  if (!recording()) return segment(inputs);
  std::vector<std::shared_ptr<AutogradMeta>> leaves;  // parameters the segment reads
  std::vector<Tensor> outputs;
  {
    UnrecordedScope unrecorded(leaves);
    outputs = segment(inputs);
  }
  std::vector<const Tensor*> input_ptrs;
  bool any = !leaves.empty();
  for (const Tensor& x : inputs) {
    input_ptrs.push_back(&x);
    any = any || (x.defined() && x.requires_grad());
  }
  if (!any) return outputs;  // nothing to differentiate
  std::vector<SavedHandle> saved;  // (inputs): what the node keeps
  std::vector<DType> input_dtypes;  // (inputs)
  for (const Tensor& x : inputs) {
    input_dtypes.push_back(x.defined() ? x.dtype() : DType::f32);
    saved.push_back(x.defined() ? save_for_backward(x, SaveRequest{Need::Value, nullptr, "checkpoint", LayerScope::current()})
                                : SavedHandle{});
  }
  // Fresh handles, so that recording marks them and not a tensor the segment passed through.
  std::vector<Tensor*> output_ptrs;
  std::vector<size_t> differentiable;  // indices of the outputs the node records (floating point)
  for (size_t j = 0; j < outputs.size(); ++j) {
    Tensor& y = outputs[j];
    if (!y.defined()) continue;
    y = y.detached();
    if (is_floating(y.dtype())) {
      output_ptrs.push_back(&y);
      differentiable.push_back(j);
    }
  }
  // The recompute runs under the forward's autocast (as PyTorch's checkpoint restores it), so it
  // computes, and saves, what the forward did.
  const DType autocast = autocast_dtype();
  Node& node = record("checkpoint", input_ptrs, output_ptrs, std::move(saved),
                      [segment, input_dtypes, differentiable, autocast](Node& self, const std::vector<Tensor>& grads) {
                        const AutocastScope as_forward(autocast);
                        return recompute_backward(segment, self, grads, input_dtypes, differentiable);
                      });
  node.inputs.insert(node.inputs.end(), leaves.begin(), leaves.end());
  return outputs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& segment, const Tensor& input) {
  return checkpoint([segment](const std::vector<Tensor>& in) { return std::vector<Tensor>{segment(in[0])}; },
                    std::vector<Tensor>{input})[0];
}

}  // namespace packrat
