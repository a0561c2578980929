#pragma once
// Gradient check by central differences (test support). The loss is sum(out * W) with a fixed
// random W, accumulated in double, so every output element's gradient is exercised.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "autograd/tape.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace packrat::testing {

// A tensor of the given shape with values uniform in [lo, hi), from Philox(seed).
inline Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  PhiloxStream s(seed, 0);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (auto& x : v) x = lo + (hi - lo) * s.uniform();
  return Tensor::from_vector(shape, v);
}

struct GradcheckOptions {
  double eps = 1e-2;         // finite-difference step (f32 data)
  double atol = 2e-3, rtol = 2e-2;
  int max_elements = 24;     // elements probed per input (spread over the tensor)
};

// fn maps the inputs to one output tensor (any shape, any layout). Checks d(sum(out*W))/d(input)
// for every input that requires grad; fails when it probed no element at all (no input requires
// grad, or the inputs are empty), so a check that checks nothing cannot pass.
inline void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, std::vector<Tensor> inputs,
                      const GradcheckOptions& o = {}) {
  auto weighted_sum = [&](const Tensor& out, const std::vector<float>& w) {
    std::vector<float> v = out.to_vector();
    double s = 0;
    for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * w[i];
    return s;
  };
  for (auto& t : inputs) t.zero_grad();
  Tensor out = fn(inputs);
  PhiloxStream ws(1234, 5);
  std::vector<float> w(static_cast<size_t>(out.numel()));
  for (auto& x : w) x = ws.uniform() * 2.0f - 1.0f;
  Tensor seed = Tensor::from_vector(out.shape(), w).to_layout(out.layout());
  backward(out, seed);

  int64_t probed = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& in = inputs[k];
    if (!in.requires_grad()) continue;
    ASSERT_TRUE(in.grad().defined()) << "input " << k << " got no gradient";
    std::vector<float> analytic = in.grad().to_vector();
    ASSERT_EQ(in.layout(), Layout::Plain) << "gradcheck perturbs plain inputs";
    float* p = in.data<float>();
    const int64_t n = in.numel();
    const int64_t stride = std::max<int64_t>(1, n / o.max_elements);
    for (int64_t i = 0; i < n; i += stride) {
      const float orig = p[i];
      double plus, minus;
      {
        NoGradScope ng;
        p[i] = orig + static_cast<float>(o.eps);
        plus = weighted_sum(fn(inputs), w);
        p[i] = orig - static_cast<float>(o.eps);
        minus = weighted_sum(fn(inputs), w);
        p[i] = orig;
      }
      const double numeric = (plus - minus) / (2 * o.eps);
      EXPECT_NEAR(analytic[static_cast<size_t>(i)], numeric, o.atol + o.rtol * std::abs(numeric))
          << "input " << k << " element " << i;
      ++probed;
    }
  }
  EXPECT_GT(probed, 0) << "gradcheck probed no element: no input requires grad";
}

}  // namespace packrat::testing
