#include "autograd/tape.h"

#include <algorithm>
#include <unordered_map>

#include "core/backend.h"

namespace packrat {

namespace {
thread_local bool t_grad_enabled = true;
thread_local std::vector<std::shared_ptr<Node>> t_tape;
thread_local GradientReadyHook t_gradient_ready;
// While an UnrecordedScope is open: the leaves its ops read.
thread_local std::vector<std::shared_ptr<AutogradMeta>>* t_unrecorded = nullptr;

bool is_grad_leaf(const std::shared_ptr<AutogradMeta>& m) { return m && m->is_leaf && m->requires_grad; }

void release_saved(Node& n) {
  for (auto& h : n.saved)
    if (h.valid()) h.store->release(h);
  n.saved.clear();
}
}  // namespace

Tensor Node::load(size_t i) const {
  PACKRAT_CHECK(i < saved.size() && saved[i].valid(), "{}: saved tensor {} was already released", where(), i);
  return saved[i].store->load(saved[i]);
}

Tensor Node::load(size_t i, DType dtype) const {
  PACKRAT_CHECK(i < saved.size() && saved[i].valid(), "{}: saved tensor {} was already released", where(), i);
  return saved[i].store->load_in(saved[i], dtype);
}

void set_gradient_ready_hook(GradientReadyHook hook) { t_gradient_ready = std::move(hook); }

bool grad_enabled() { return t_grad_enabled; }
NoGradScope::NoGradScope() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradScope::~NoGradScope() { t_grad_enabled = previous_; }
EnableGradScope::EnableGradScope() : previous_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradScope::~EnableGradScope() { t_grad_enabled = previous_; }

UnrecordedScope::UnrecordedScope(std::vector<std::shared_ptr<AutogradMeta>>& leaves) : previous_(t_unrecorded) {
  t_unrecorded = &leaves;
}
UnrecordedScope::~UnrecordedScope() { t_unrecorded = previous_; }
bool recording() { return t_grad_enabled && t_unrecorded == nullptr; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  if (t_unrecorded) {
    for (const Tensor* t : inputs)
      if (t && t->defined() && is_grad_leaf(t->autograd_meta()) &&
          std::find(t_unrecorded->begin(), t_unrecorded->end(), t->autograd_meta()) == t_unrecorded->end())
        t_unrecorded->push_back(t->autograd_meta());
    return false;
  }
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

Node& record(std::string op, const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
             std::vector<SavedHandle> saved,
             std::function<std::vector<Tensor>(Node&, const std::vector<Tensor>&)> backward_fn) {
  auto node = std::make_shared<Node>();
  node->op = std::move(op);
  node->layer = LayerScope::current();
  for (const Tensor* t : inputs)
    node->inputs.push_back(t && t->defined() && t->requires_grad() ? t->autograd_meta() : nullptr);
  for (Tensor* t : outputs) {
    t->set_requires_grad(true);
    auto& meta = t->autograd_meta();
    meta->is_leaf = false;
    meta->grad_fn = node;
    node->outputs.push_back(meta);
  }
  node->saved = std::move(saved);
  node->backward = std::move(backward_fn);
  t_tape.push_back(node);
  return *node;
}

void accumulate_into(Tensor& dst, const Tensor& src) {
  if (!dst.defined()) {
    dst = src;
    return;
  }
  PACKRAT_CHECK(dst.shape() == src.shape(), "backward: gradient of shape {} cannot accumulate into {}",
                src.shape().str(), dst.shape().str());
  check_same_device("backward", {&dst, &src});
  // Out of place: gradients may share buffers (add passes one through).
  dst = backend_of(dst).binary(BinaryOp::Add, dst, src);
}

void backward(const Tensor& loss) {
  PACKRAT_CHECK(loss.defined() && loss.numel() == 1,
                "backward: the loss must be a scalar; got {} (pass a seed gradient for other outputs)",
                loss.defined() ? loss.shape().str() : std::string("an undefined tensor"));
  Tensor seed;
  {
    TagScope tag(MemTag::Gradient);
    DeviceScope on(loss.device());
    seed = loss.dtype() == DType::f64 ? Tensor::from_vector(loss.shape(), std::vector<double>{1.0})
                                      : Tensor::full(loss.shape(), 1.0f);
  }
  backward(loss, seed);
}

namespace {

thread_local int t_backward_depth = 0;  // run_nodes calls under way on this thread (nested: recompute)
struct BackwardDepth {
  BackwardDepth() { ++t_backward_depth; }
  ~BackwardDepth() { --t_backward_depth; }
};

// Tells the stores of the node at `it` and of the next kMaxPrefetchDistance nodes to run how far
// away each is, so that a store keeping them elsewhere (offload) brings them back in time.
void prefetch_ahead(std::vector<std::shared_ptr<Node>>::reverse_iterator it,
                    std::vector<std::shared_ptr<Node>>::reverse_iterator end) {
  int distance = 0;
  for (; it != end && distance <= kMaxPrefetchDistance; ++it) {
    if ((*it)->done) continue;
    for (const SavedHandle& h : (*it)->saved)
      if (h.valid()) h.store->prefetch(h, distance);
    ++distance;
  }
}

// Runs the backward of every node of `tape` not yet done, newest first, from the gradients in
// their outputs' slots. `leaf_uses` (null without a gradient-ready hook) counts, per leaf, the
// nodes still to run that use it.
void run_nodes(std::vector<std::shared_ptr<Node>>& tape, std::unordered_map<AutogradMeta*, int64_t>* leaf_uses) {
  NoGradScope no_grad;
  TagScope tag(MemTag::Gradient);
  // When a node's backward throws (out of memory under the allocator's limit, a version check),
  // the nodes not yet run still hold saved handles: release them so the stores free their bytes.
  struct ReleaseUnlessCompleted {
    std::vector<std::shared_ptr<Node>>& nodes;
    bool completed = false;
    ~ReleaseUnlessCompleted() {
      if (completed) return;
      for (auto& n : nodes) {
        release_saved(*n);
        n->done = true;
      }
    }
  } release_guard{tape};
  BackwardDepth depth;
  for (auto it = tape.rbegin(); it != tape.rend(); ++it) {
    Node& node = **it;
    if (node.done) continue;
    prefetch_ahead(it, tape.rend());
    std::vector<Tensor> grad_outputs;
    bool any = false;
    for (auto& w : node.outputs) {
      auto m = w.lock();
      grad_outputs.push_back(m ? m->grad : Tensor());
      any = any || (m && m->grad.defined());
    }
    if (any) {  // ops with several outputs get undefined grads for the unused ones
      LayerScope layer(node.layer);
      for (const auto& h : node.saved)
        if (h.valid()) h.store->note_backward(h, grad_outputs);
      node.grads_so_far.assign(node.inputs.size(), Tensor());
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const auto& in = node.inputs[i];
        if (in && in->requires_grad && !in->is_leaf && in->grad.defined() && in->grad.sole_reference())
          node.grads_so_far[i] = in->grad;
      }
      std::vector<Tensor> grads = node.backward(node, grad_outputs);
      std::vector<Tensor> so_far = std::move(node.grads_so_far);
      node.grads_so_far.clear();
      PACKRAT_CHECK(grads.size() == node.inputs.size(), "{}: backward returned {} gradients for {} inputs",
                    node.where(), grads.size(), node.inputs.size());
      for (size_t i = 0; i < grads.size(); ++i) {
        auto& in = node.inputs[i];
        if (!in || !in->requires_grad || !grads[i].defined()) continue;
        if (i < so_far.size() && so_far[i].defined() && grads[i].same_storage(so_far[i])) {
          in->grad = grads[i];  // the op added its gradient into the one the input held
        } else if (in->is_leaf && !in->grad.defined()) {
          in->grad = grads[i].clone();  // a leaf owns its gradient buffer (tagged Gradient)
        } else {
          accumulate_into(in->grad, grads[i]);
        }
      }
    }
    release_saved(node);
    node.done = true;
    if (leaf_uses && t_gradient_ready)
      for (auto& in : node.inputs)
        if (is_grad_leaf(in) && --(*leaf_uses)[in.get()] == 0) t_gradient_ready(*in);
    for (auto& w : node.outputs)
      if (auto m = w.lock()) {
        m->grad = Tensor();  // non-leaf gradients are not kept
        m->consumed = true;
        m->consumed_by = node.where();
      }
  }
  release_guard.completed = true;
}

// The leaf counts of the backward running on this thread (null: none, or no hook).
thread_local std::unordered_map<AutogradMeta*, int64_t>* t_leaf_uses = nullptr;

// Adds, per leaf, the nodes of `nodes` not yet run that use it.
void count_leaf_uses(const std::vector<std::shared_ptr<Node>>& nodes, std::unordered_map<AutogradMeta*, int64_t>& uses) {
  for (auto& n : nodes)
    if (!n->done)
      for (auto& in : n->inputs)
        if (is_grad_leaf(in)) ++uses[in.get()];
}

}  // namespace

void backward(const Tensor& output, const Tensor& seed) {
  PACKRAT_CHECK(output.requires_grad(), "backward: the tensor does not require grad (no parameter or input "
                                        "that requires grad was used to compute it, or grad mode was off)");
  auto meta = output.autograd_meta();
  if (meta->is_leaf) {
    TagScope tag(MemTag::Gradient);
    accumulate_into(meta->grad, seed.clone());
    return;
  }
  auto producer = meta->grad_fn.lock();
  if (!producer || producer->done || meta->consumed)
    fail("backward: called a second time on a graph whose saved tensors were already released (by {}); "
         "run the forward again before calling backward",
         producer ? producer->where() : meta->consumed_by.empty() ? std::string("an earlier backward") : meta->consumed_by);
  meta->grad = seed;

  auto tape = std::move(t_tape);
  t_tape.clear();
  // For the gradient-ready hook: how many nodes still to run use each leaf.
  std::unordered_map<AutogradMeta*, int64_t> leaf_uses;
  if (t_gradient_ready) count_leaf_uses(tape, leaf_uses);
  auto* previous = t_leaf_uses;
  t_leaf_uses = t_gradient_ready ? &leaf_uses : nullptr;
  struct Restore {
    std::unordered_map<AutogradMeta*, int64_t>* previous;
    ~Restore() { t_leaf_uses = previous; }
  } restore{previous};
  run_nodes(tape, t_leaf_uses);
}

void backward_nested(Node& owner, std::vector<std::shared_ptr<Node>> nodes) {
  if (t_leaf_uses) {
    count_leaf_uses(nodes, *t_leaf_uses);  // before the owner's uses go: no count passes 0 here
    for (auto& in : owner.inputs)
      if (is_grad_leaf(in)) --(*t_leaf_uses)[in.get()];
  }
  for (auto& in : owner.inputs)
    if (is_grad_leaf(in)) in = nullptr;
  run_nodes(nodes, t_leaf_uses);
}

std::vector<std::shared_ptr<Node>> take_tape_since(size_t mark) {
  PACKRAT_CHECK(mark <= t_tape.size(), "take_tape_since: mark {} is past the tape's {} nodes", mark, t_tape.size());
  std::vector<std::shared_ptr<Node>> taken(t_tape.begin() + static_cast<std::ptrdiff_t>(mark), t_tape.end());
  t_tape.resize(mark);
  return taken;
}

void clear_tape() {
  for (auto& n : t_tape) {
    release_saved(*n);
    n->done = true;
  }
  t_tape.clear();
}

size_t tape_size() { return t_tape.size(); }

bool in_backward() { return t_backward_depth > 0; }

}  // namespace packrat
