#pragma once
// Per-tensor autograd state, kept apart from the data so that the tape can refer to a
// tensor's gradient slot without keeping its buffer alive.
#include <memory>
#include <string>

#include "core/tensor.h"

namespace packrat {

struct Node;

struct AutogradMeta {
  bool requires_grad = false;
  bool is_leaf = true;        // created by the user (parameters, inputs), not by an op
  Tensor grad;                // accumulated gradient (same shape and layout as the tensor)
  std::weak_ptr<Node> grad_fn;  // the node that produced this tensor, for non-leaves
  bool consumed = false;      // set once the producing node's backward has run
  std::string consumed_by;    // that node ("conv2d layer1.0.conv1"), for the second-backward error
};

}  // namespace packrat
