#pragma once
// `model.arch: sequential`: a model described in the config by `model.layers`, a list of layers
// (models/sequential_spec.h) built as PyTorch's nn.Sequential, so that its checkpoint names are
// the ones the same nn.Sequential has (`0.weight`, `1.running_mean`, `4.body.0.weight`) and load
// there with strict=True. A residual item is a module with one child, `body`:
//
//   class Residual(nn.Module):
//       def __init__(self, *layers):
//           super().__init__()
//           self.body = nn.Sequential(*layers)
//       def forward(self, x): return x + self.body(x)
//
// Input channels and features are chained from the input (ModelSpec::in_channels, image_size,
// square); a list whose shapes do not chain, a residual whose body changes the shape, or an
// output other than (N, num_classes) is an error naming the layer (model.layers[4].residual[2]).
#include <memory>

#include "layers/module.h"
#include "layers/sequential.h"
#include "models/registry.h"

namespace packrat {

// x + body(x): a residual block (Module::is_block, for memory.recompute: [blocks]).
class Residual : public Module {
 public:
  explicit Residual(std::shared_ptr<Sequential> body);
  Tensor forward(const Tensor& x) override;  // same shape in and out
  bool is_block() const override { return true; }
  Sequential& body() { return *body_; }

 private:
  std::shared_ptr<Sequential> body_;
};

// The model of spec.layers for (N, spec.in_channels, spec.image_size, spec.image_size) inputs and
// spec.num_classes outputs; parameters seeded from spec.seed, layer by layer. Throws
// packrat::Error naming the layer on a list that does not fit.
std::shared_ptr<Module> make_sequential_model(const ModelSpec& spec);

}  // namespace packrat
