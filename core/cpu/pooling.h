#pragma once
// oneDNN pooling over a 4-d tensor as it lies (plain or nChw16c; outputs keep the layout).
// Max pooling in training mode also returns oneDNN's workspace: for each output, the index of
// the maximum within its window (u8 for windows under 256 elements, i32 otherwise), shaped and
// laid out like the output.
#include "core/backend.h"
#include "core/tensor.h"

namespace packrat::cpu {

// PoolGeometry and PoolKind are device-agnostic: core/backend.h.

// y (N, C, OH, OW) in x's layout; when `workspace` is non-null (max pooling for training) it
// receives the argmax-within-window tensor.
Tensor pool_forward(const Tensor& x, const PoolGeometry& g, PoolKind kind, Tensor* workspace);
// dx (N, C, H, W) in `layout`, from gy (any layout) and, for max pooling, the workspace.
Tensor pool_backward(const Tensor& gy, const Tensor& workspace, const PoolGeometry& g, PoolKind kind, Layout layout);

// Dtype of the max-pooling workspace for a window of kh*kw elements.
DType pool_workspace_dtype(int64_t window);

}  // namespace packrat::cpu
