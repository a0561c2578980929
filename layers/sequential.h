#pragma once
// nn.Sequential: children named "0", "1", ... applied in order.
#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"

namespace packrat {

class Sequential : public Module {
 public:
  Sequential() = default;
  // Appends m as child str(size()); returns it.
  template <typename M>
  std::shared_ptr<M> add(std::shared_ptr<M> m) {
    auto named = register_module(std::to_string(modules_.size()), std::move(m));
    modules_.push_back(named);
    return named;
  }
  // Appends m under its own name (nn.Sequential(OrderedDict(...)): torchvision's
  // encoder_layer_<i>, heads.head); returns it.
  template <typename M>
  std::shared_ptr<M> add_named(std::string name, std::shared_ptr<M> m) {
    auto named = register_module(std::move(name), std::move(m));
    modules_.push_back(named);
    return named;
  }
  Tensor forward(const Tensor& x) override;

  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return modules_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace packrat
