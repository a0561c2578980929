#pragma once
// The GACT tests' toy network (tests/quant/gact_policy_test.cpp, gact_device_test.cpp): two
// linear branches, one deliberately sensitive, and the options the tests start from.
#include <cstring>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "quant/group/gact_store.h"
#include "tests/support/gradcheck.h"

namespace packrat::testing {

// Two branches: out = linear(xa, Wa) + 30 * linear(xb, Wb). The quantization noise of xb reaches
// Wb's gradient 30x amplified: xb's sensitivity is ~900x xa's, so it must get more bits.
struct ToyNet {
  Tensor wa, wb, xa, xb, seed;
  ToyNet() {
    wa = param({8, 64}, 1);
    wb = param({8, 64}, 2);
    xa = random_tensor({16, 64}, 3);
    xb = random_tensor({16, 64}, 4);
    seed = random_tensor({16, 8}, 5);
  }
  static Tensor param(const Shape& s, uint64_t k) {
    Tensor p = Tensor::empty(s, DType::f32, Layout::Plain, MemTag::Parameter);
    Tensor v = random_tensor(s, k);
    std::memcpy(p.raw(), v.raw(), v.nbytes());
    p.set_requires_grad();
    return p;
  }
  std::vector<Tensor> grads(StorePolicy& policy) {
    PolicyScope scope(policy);
    wa.zero_grad();
    wb.zero_grad();
    Tensor ya = ops::linear(xa, wa, Tensor());  // saves xa: tensor 0
    Tensor yb = ops::linear(xb, wb, Tensor());  // saves xb: tensor 1
    Tensor out = ops::add(ya, ops::scale(yb, 30.0f));
    backward(out, seed);
    return {wa.grad().clone(), wb.grad().clone()};
  }
};

inline GactOptions toy_options(GactEstimator e) {
  GactOptions o;
  o.avg_bits = 3;
  o.adapt_interval = 10;
  o.estimator = e;
  o.store.quant.group_size = 64;
  return o;
}

// A GACT store's exported state.
using GactState = std::vector<std::pair<std::string, Tensor>>;

// Same entries, same bytes.
inline bool same_state(const GactState& a, const GactState& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor &x = a[i].second, &y = b[i].second;
    if (a[i].first != b[i].first || x.dtype() != y.dtype() || x.shape() != y.shape() ||
        std::memcmp(x.raw(), y.raw(), x.nbytes()) != 0)
      return false;
  }
  return true;
}

}  // namespace packrat::testing
