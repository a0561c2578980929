// The backend test, optimizer section: one fused SGD step (plain, momentum first and later
// steps, Nesterov, weight decay, dampening) and two AdamW steps on every backend against
// PyTorch's formulas in double.
#include <cmath>
#include <string>
#include <vector>

#include "tests/core/backend_test_support.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::host_values;

TEST(BackendOptim, SgdStepsMatchTheFormula) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const Tensor hp = host_random({2, 32, 3, 5}, 1), hg = host_random({2, 32, 3, 5}, 2), hb = host_random({2, 32, 3, 5}, 3);
    const std::vector<float> pv = hp.to_vector(), gv = hg.to_vector(), bv = hb.to_vector();
    struct Case {
      float momentum, dampening, wd;
      bool nesterov, first;
    };
    for (const Case& c : {Case{0, 0, 0.01f, false, false}, Case{0.9f, 0, 0.01f, false, true},
                          Case{0.9f, 0.1f, 0.0f, false, false}, Case{0.9f, 0, 0.001f, true, false}}) {
      const float lr = 0.1f;
      std::vector<float> want_p(pv.size()), want_b(pv.size());
      for (size_t i = 0; i < pv.size(); ++i) {
        const double d = gv[i] + static_cast<double>(c.wd) * pv[i];
        const double buf = c.first ? d : c.momentum * static_cast<double>(bv[i]) + (1 - c.dampening) * d;
        const double step = c.momentum == 0 ? d : c.nesterov ? d + c.momentum * buf : buf;
        want_p[i] = static_cast<float>(pv[i] - lr * step);
        want_b[i] = static_cast<float>(buf);
      }
      for (Layout layout : {Layout::Plain, Layout::nChw16c}) {
        Tensor p = b->to_layout(hp.to(b->device()), layout);
        p = p.clone();
        const Tensor g = b->to_layout(hg.to(b->device()), layout);
        Tensor buf = c.momentum == 0 ? Tensor() : b->to_layout(hb.to(b->device()), layout).clone();
        b->sgd_update(p, g, buf, Backend::SgdStep{lr, c.wd, c.momentum, c.dampening, c.nesterov, c.first});
        const std::string what = "sgd momentum " + std::to_string(c.momentum) + (c.nesterov ? " nesterov" : "") +
                                 (c.first ? " first" : "") + " " + std::string(layout_name(layout));
        expect_close(host_values(p), want_p, 1e-6f, 1e-6f, what);
        if (buf.defined()) expect_close(host_values(buf), want_b, 1e-6f, 1e-6f, what + " buffer");
      }
    }
  }
}

// Several parameters in one call (one launch on a GPU): each as sgd_update steps it alone, with
// its own first step and buffer (or none), in its own layout.
TEST(BackendOptim, SgdOverManyParametersStepsEachAsAlone) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const Backend::SgdStep step{0.05f, 0.001f, 0.9f, 0.0f, true, false};
    const std::vector<Shape> shapes{{2, 16, 3, 3}, {7}, {0}, {64, 32, 3, 3}, {5000}, {3, 4}};
    std::vector<Tensor> alone_p, alone_b, many_p, many_b, grads;
    std::vector<Backend::SgdOperands> operands;
    for (size_t k = 0; k < shapes.size(); ++k) {
      const uint64_t seed = 10 + 3 * k;
      const Layout layout = shapes[k].rank() == 4 && k == 0 ? Layout::nChw16c : Layout::Plain;
      auto make = [&](uint64_t s) { return b->to_layout(host_random(shapes[k], s).to(b->device()), layout).clone(); };
      grads.push_back(make(seed));
      alone_p.push_back(make(seed + 1));
      many_p.push_back(alone_p.back().clone());
      const bool momentum = k != 1;
      alone_b.push_back(momentum ? make(seed + 2) : Tensor());
      many_b.push_back(momentum ? alone_b.back().clone() : Tensor());
      Backend::SgdStep s = step;
      s.first = k == 3;
      if (!momentum) s.momentum = 0;
      b->sgd_update(alone_p.back(), grads.back(), alone_b.back(), s);
    }
    for (size_t k = 0; k < shapes.size(); ++k)
      operands.push_back({&many_p[k], &grads[k], many_b[k].defined() ? &many_b[k] : nullptr, k == 3});
    // Momentum 0 for the entry without a buffer comes from its null buffer, not from the step.
    b->sgd_update_many(operands, step);
    for (size_t k = 0; k < shapes.size(); ++k) {
      const std::string what = "parameter " + std::to_string(k) + " " + shapes[k].str();
      EXPECT_EQ(host_values(many_p[k]), host_values(alone_p[k])) << what;
      if (many_b[k].defined()) {
        EXPECT_EQ(host_values(many_b[k]), host_values(alone_b[k])) << what << " buffer";
      }
    }
  }
}

TEST(BackendOptim, AdamWStepsMatchTheFormula) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const Tensor hp = host_random({1000}, 4), hg1 = host_random({1000}, 5), hg2 = host_random({1000}, 6);
    const std::vector<float> p0 = hp.to_vector();
    std::vector<double> p(p0.begin(), p0.end()), m(1000, 0.0), v(1000, 0.0);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.05;
    Tensor tp = hp.to(b->device()).clone();
    Tensor tm = Tensor::zeros({1000}), tv = Tensor::zeros({1000});
    int t = 0;
    for (const Tensor& hg : {hg1, hg2}) {
      ++t;
      const std::vector<float> g = hg.to_vector();
      for (size_t i = 0; i < p.size(); ++i) {
        p[i] *= 1 - lr * wd;
        // The betas as the f32 kernel sees them (1 - 0.999f is 1.7e-5 off 0.001 relative).
        const double fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
        m[i] = fb1 * m[i] + (1 - fb1) * g[i];
        v[i] = fb2 * v[i] + (1 - fb2) * g[i] * g[i];
        const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
        p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
      Backend::AdamWStep st;
      st.decay = static_cast<float>(1 - lr * wd);
      st.beta1 = static_cast<float>(b1);
      st.beta2 = static_cast<float>(b2);
      st.step_size = static_cast<float>(lr / (1 - std::pow(b1, t)));
      st.bc2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(b2, t)));
      st.eps = static_cast<float>(eps);
      b->adamw_update(tp, hg.to(b->device()), tm, tv, st);
      expect_close(host_values(tp), std::vector<float>(p.begin(), p.end()), 1e-5f, 1e-6f, "adamw p, step " + std::to_string(t));
      expect_close(host_values(tm), std::vector<float>(m.begin(), m.end()), 1e-5f, 1e-7f, "adamw m");
      expect_close(host_values(tv), std::vector<float>(v.begin(), v.end()), 1e-5f, 1e-9f, "adamw v");
    }
  }
}

}  // namespace
}  // namespace packrat
