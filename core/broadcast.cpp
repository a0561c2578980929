#include "core/broadcast.h"

#include <algorithm>

#include "core/backend.h"
#include "core/error.h"

namespace packrat {

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
  }
  return "?";
}

std::vector<int64_t> broadcast_shape(std::string_view what, const Shape& a, const Shape& b) {
  const auto& da = a.dims();
  const auto& db = b.dims();
  const size_t r = std::max(da.size(), db.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t x = i < da.size() ? da[da.size() - 1 - i] : 1, y = i < db.size() ? db[db.size() - 1 - i] : 1;
    PACKRAT_CHECK(x == y || x == 1 || y == 1, "{}: shapes {} and {} do not broadcast", what, a.str(), b.str());
    out[r - 1 - i] = x == 1 ? y : x;
  }
  return out;
}

void check_broadcasts_to(std::string_view what, const Shape& x, const Shape& from) {
  const auto& dx = x.dims();
  const auto& ds = from.dims();
  bool ok = ds.size() <= dx.size();
  for (size_t i = 0; ok && i < ds.size(); ++i) {
    const int64_t s = ds[ds.size() - 1 - i], d = dx[dx.size() - 1 - i];
    ok = s == d || s == 1;
  }
  PACKRAT_CHECK(ok, "{}: {} does not broadcast from {}", what, x.str(), from.str());
}

Broadcast broadcast_dims(const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& operands) {
  const size_t r = out.size();
  Broadcast b;
  b.stride.resize(operands.size());
  std::vector<std::vector<int64_t>> full(operands.size(), std::vector<int64_t>(r, 0));
  for (size_t k = 0; k < operands.size(); ++k) {
    const auto& dims = operands[k];
    int64_t st = 1;
    for (size_t i = 0; i < dims.size(); ++i) {
      const size_t d = dims.size() - 1 - i, o = r - 1 - i;
      full[k][o] = dims[d] == 1 ? 0 : st;
      st *= dims[d];
    }
  }
  for (size_t i = 0; i < r; ++i) {
    if (out[i] == 1) continue;  // contributes nothing
    bool merge = !b.size.empty();
    for (size_t k = 0; k < operands.size() && merge; ++k) merge = b.stride[k].back() == full[k][i] * out[i];
    if (merge) {
      b.size.back() *= out[i];
      for (size_t k = 0; k < operands.size(); ++k) b.stride[k].back() = full[k][i];
    } else {
      b.size.push_back(out[i]);
      for (size_t k = 0; k < operands.size(); ++k) b.stride[k].push_back(full[k][i]);
    }
  }
  if (b.size.empty()) {  // every dim 1: one element
    b.size.push_back(1);
    for (auto& s : b.stride) s.push_back(0);
  }
  return b;
}

}  // namespace packrat
