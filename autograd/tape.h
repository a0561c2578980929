#pragma once
// Tape autograd. With grad mode on, each differentiable op appends a Node to the thread's
// tape; backward(loss) walks it in reverse, accumulates gradients with +=, and releases each
// node's saved handles as soon as its backward has run.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/saved_tensor_store.h"
#include "core/autograd_meta.h"
#include "core/tensor.h"

namespace packrat {

struct Node {
  std::string op;     // "conv2d"
  std::string layer;  // "layer1.0.conv1"
  std::vector<std::shared_ptr<AutogradMeta>> inputs;  // gradient slots of the inputs (null: no grad)
  std::vector<std::weak_ptr<AutogradMeta>> outputs;   // gradient slots of the outputs
  std::vector<SavedHandle> saved;                     // everything kept for backward, via the store
  // grads[i] = dL/d inputs[i] (undefined where no gradient flows) from dL/d outputs.
  // Captures only plain values (strides, shapes...), never tensors: tensors go through `saved`.
  std::function<std::vector<Tensor>(Node& self, const std::vector<Tensor>& grad_outputs)> backward;
  bool done = false;
  // While backward runs: the gradient input i holds already, where the node may add its own into
  // it in place (the tape offers a non-leaf gradient that no other tensor refers to); an op that
  // does returns that very tensor as the input's gradient, and the tape adds nothing. A
  // convolution's input gradient lands so (cuDNN's beta = 1) on a residual block's input.
  std::vector<Tensor> grads_so_far;

  Tensor load(size_t i) const;  // saved[i] through its store
  Tensor load(size_t i, DType dtype) const;  // the same in a kernel's dtype (SavedTensorStore::load_in)
  Tensor grad_so_far(size_t i) const { return i < grads_so_far.size() ? grads_so_far[i] : Tensor(); }
  std::string where() const { return layer.empty() ? op : op + " " + layer; }
};

// Grad mode (thread-local). NoGradScope turns recording off, e.g. for evaluation.
bool grad_enabled();
class NoGradScope {
 public:
  NoGradScope();
  ~NoGradScope();

 private:
  bool previous_;
};

// True when an op with these inputs must record a node.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// Records a node producing `outputs` from `inputs`; marks the outputs as requiring grad.
// Ops call this after computing the forward.
Node& record(std::string op, const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
             std::vector<SavedHandle> saved,
             std::function<std::vector<Tensor>(Node&, const std::vector<Tensor>&)> backward);

// Backward from a scalar loss (seed 1) or with an explicit seed gradient.
void backward(const Tensor& loss);
void backward(const Tensor& output, const Tensor& seed);

// Called by backward() when a leaf's gradient is final: no node still to run uses the leaf (a
// data-parallel reducer starts the leaf's all-reduce there, while the backward goes on). The
// leaf's grad may be undefined when no gradient reached it. Thread-local, like the tape; an
// empty function removes the hook.
using GradientReadyHook = std::function<void(AutogradMeta& leaf)>;
void set_gradient_ready_hook(GradientReadyHook hook);

// ---- for primitives that run a forward inside a node's backward (autograd/checkpoint.h)

// Grad mode on for a scope (backward turns it off).
class EnableGradScope {
 public:
  EnableGradScope();
  ~EnableGradScope();

 private:
  bool previous_;
};

// Ops run in this scope compute their forward as usual (grad mode stays on) but record no node
// and save nothing; the leaves requiring grad that they read (parameters) are appended, once
// each, to `leaves`.
class UnrecordedScope {
 public:
  explicit UnrecordedScope(std::vector<std::shared_ptr<AutogradMeta>>& leaves);
  ~UnrecordedScope();

 private:
  std::vector<std::shared_ptr<AutogradMeta>>* previous_;
};

// Whether ops record nodes now: grad mode on and no UnrecordedScope open.
bool recording();

// The nodes recorded since `mark` (an earlier tape_size()), taken off the thread's tape.
std::vector<std::shared_ptr<Node>> take_tape_since(size_t mark);

// Runs the backward of `nodes`, recorded inside `owner`'s backward, from the gradients already
// placed in their outputs' slots, releasing each node's saved handles as soon as it has run.
// Gradients reach the nodes' inputs as in backward(); owner's inputs that are leaves are
// cleared, as the nodes' own uses replace owner's: the gradient-ready hook fires for a leaf when
// the last node using it, inner or outer, has run, as it would have without the owner.
void backward_nested(Node& owner, std::vector<std::shared_ptr<Node>> nodes);

// Drops the tape and releases every saved handle (e.g. after an eval forward with grad on,
// or when a step is abandoned).
void clear_tape();
size_t tape_size();

// Whether a backward is running on this thread (a recomputed segment saves in it).
bool in_backward();
// How many nodes ahead of the running one the backward tells their stores of them
// (SavedTensorStore::prefetch): the deepest prefetch a store can ask for.
constexpr int kMaxPrefetchDistance = 16;  // = kMaxOffloadPrefetch

// In-place accumulation dst += src (same shape; layouts reconciled).
void accumulate_into(Tensor& dst, const Tensor& src);

}  // namespace packrat
