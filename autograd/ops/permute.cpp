// permute: an axis permutation, a copy (torch.permute + .contiguous()). Saves nothing; the
// gradient goes back through the inverse permutation.
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/backend.h"

namespace packrat::ops {

Tensor permute(const Tensor& x, std::span<const int64_t> perm_in) {
  const std::string where = op_where("permute");
  PACKRAT_CHECK(x.defined(), "{}: the input is undefined", where);
  const int64_t r = x.rank();
  PACKRAT_CHECK(static_cast<int64_t>(perm_in.size()) == r, "{}: {} axes given for a {}-d input {}", where,
                perm_in.size(), r, x.shape().str());
  std::vector<int64_t> perm(perm_in.begin(), perm_in.end()), inverse(r, -1);
  for (int64_t k = 0; k < r; ++k) {
    int64_t a = perm[k] < 0 ? perm[k] + r : perm[k];
    PACKRAT_CHECK(a >= 0 && a < r && inverse[a] < 0, "{}: ({}) is not a permutation of {} axes", where,
                  fmt::join(perm_in, ", "), r);
    perm[k] = a;
    inverse[a] = k;
  }
  Tensor y = backend_of(x).permute(x, perm);
  if (needs_grad({&x})) {
    const Layout x_layout = x.layout();
    record("permute", {&x}, {&y}, {}, [inverse, x_layout](Node&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      return {backend_of(g[0]).permute(g[0], inverse).to_layout(x_layout)};
    });
  }
  return y;
}

}  // namespace packrat::ops
