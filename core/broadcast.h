#pragma once
// Numpy broadcasting, device-agnostic: the broadcast shape of two operands, the check that a
// shape broadcasts onto another (the reverse, reduce_sum_to), and the merged iteration dims with
// each operand's element strides that the backends' broadcasting loops and kernels run over.
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/shape.h"

namespace packrat {

enum class BinaryOp : uint8_t;  // core/backend.h

// "add", "sub", "mul", "div": the op's name in messages.
const char* binary_op_name(BinaryOp op);

// The broadcast shape of a and b (trailing dims aligned, size-1 dims stretched); throws
// "<what>: shapes (2, 3) and (4, 3) do not broadcast".
std::vector<int64_t> broadcast_shape(std::string_view what, const Shape& a, const Shape& b);

// Throws "<what>: (2, 3) does not broadcast from (4, 3)" unless `from` broadcasts onto x (every
// trailing dim of `from` is x's or 1, and `from` has no more dims than x).
void check_broadcasts_to(std::string_view what, const Shape& x, const Shape& from);

// Dims of a broadcast, right-aligned, with each operand's element stride (0 where it is
// stretched); adjacent dims that are contiguous for all operands are merged, so that
// (N, C, 1, 1) x (N, C, H, W) runs as (N C, 1) x (N C, H W).
struct Broadcast {
  std::vector<int64_t> size;                 // out dims, outermost first
  std::vector<std::vector<int64_t>> stride;  // per operand
};

// out: the iteration dims; operands: the shapes (as dims) that broadcast onto them.
Broadcast broadcast_dims(const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& operands);

// Offsets of row `row` (every dim but the last, row-major) in each operand.
inline void row_offsets(const Broadcast& b, int64_t row, int64_t* off) {
  const size_t r = b.size.size();
  for (size_t k = 0; k < b.stride.size(); ++k) off[k] = 0;
  for (size_t d = r - 1; d-- > 0;) {
    const int64_t i = row % b.size[d];
    row /= b.size[d];
    for (size_t k = 0; k < b.stride.size(); ++k) off[k] += i * b.stride[k][d];
  }
}

}  // namespace packrat
