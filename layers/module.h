#pragma once
// Module: a layer or model with PyTorch-style dotted names for its parameters and buffers
// (`layer1.0.conv1.weight`, `bn1.running_mean`), so checkpoints load in PyTorch and back.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace packrat {

// The counters that key a module's random masks (Dropout, StochasticDepth, attention dropout):
// a training forward draws its mask from Philox at (run seed, index, calls), then counts the call.
// Checkpoints keep them, so a resumed run draws the masks the uninterrupted run would have.
struct MaskStream {
  uint64_t index = 0, calls = 0;
};

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x);  // forward inside a LayerScope named after this module

  // (dotted name, tensor) in registration order, children recursively.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }
  void zero_grad();

  const std::string& name() const { return name_; }  // this module's own name in its parent
  // Every module below this one with its dotted name, parents before children.
  std::vector<std::pair<std::string, Module*>> named_modules();

  // Recomputation (memory.recompute, layers/recompute.h): while ops record, operator() runs this
  // module's forward as one checkpoint segment (autograd/checkpoint.h), which keeps only its
  // input and runs the forward again in backward, replaying the module's mask streams so that
  // its random masks are the same both times. The module must outlive the step's backward.
  void set_recompute(bool on) { recompute_ = on; }
  // A residual or transformer block (ResNet's BasicBlock, a ViT encoder layer, ...): what
  // `memory.recompute: [blocks]` and the gact-CB1 preset recompute. A model of your own says so
  // by overriding this.
  virtual bool is_block() const { return false; }
  bool recompute() const { return recompute_; }
  // The dotted names of every module below this one, parents before children ("layer1",
  // "layer1.0", "layer1.0.conv1", ...): the layer names saved tensors are requested under.
  std::vector<std::string> module_names() const;

  // (dotted name, counter) of every mask stream, children recursively; a module's own stream is
  // named after the module (`features.3.1.stochastic_depth`, `transformer.h.0.attn.attn_dropout`).
  std::vector<std::pair<std::string, MaskStream*>> named_mask_streams();
  std::vector<std::pair<std::string, MaskStream>> named_mask_streams() const;  // their values

 protected:
  // This module's own mask streams, named relative to it ("" for the module itself).
  virtual std::vector<std::pair<std::string, MaskStream*>> own_mask_streams() { return {}; }

  // Parameters are allocated with the Parameter tag and require grad; buffers (running stats)
  // are tagged Parameter too (they are model state) but do not require grad.
  Tensor& register_parameter(std::string name, Tensor t);
  Tensor& register_buffer(std::string name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    m->name_ = name;
    children_.emplace_back(std::move(name), m);
    return m;
  }

 private:
  void collect(const std::string& prefix, bool buffers, std::vector<std::pair<std::string, Tensor>>& out) const;
  void collect_mask_streams(const std::string& path, std::vector<std::pair<std::string, MaskStream*>>& out);
  Tensor forward_as_segment(const Tensor& x);
  std::string name_;
  bool training_ = true;
  bool recompute_ = false;
  std::vector<std::pair<std::string, Tensor>> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace packrat
