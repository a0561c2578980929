#pragma once
// Module: a layer or model with PyTorch-style dotted names for its parameters and buffers
// (`layer1.0.conv1.weight`, `bn1.running_mean`), so checkpoints load in PyTorch and back.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace packrat {

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

 protected:
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
  std::string name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace packrat
