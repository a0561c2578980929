// The backend test, pointwise and elementwise sections: every activation's f, f' (from the
// input and, where offered, from the output) and the fused grad * f', binary ops with and
// without broadcasting, scale, accumulate and the reductions, on every backend against slow
// double-precision references written here.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/pointwise.h"
#include "core/parallel.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/errors.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::host_values;

struct Reference {
  std::function<double(double)> f, df;
};

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double phi_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// PyTorch's definitions, in double.
Reference reference(ActivationId id) {
  constexpr double kSeluAlpha = 1.6732632423543772848170429916717, kSeluScale = 1.0507009873554804934193349852946;
  auto elu = [](double alpha, double scale) {
    return Reference{[=](double x) { return x > 0 ? scale * x : scale * alpha * std::expm1(x); },
                     [=](double x) { return x > 0 ? scale : scale * alpha * std::exp(x); }};
  };
  auto softplus = [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); };
  switch (id) {
    case ActivationId::relu: return {[](double x) { return x > 0 ? x : 0.0; }, [](double x) { return x > 0 ? 1.0 : 0.0; }};
    case ActivationId::leaky_relu:
      return {[](double x) { return x > 0 ? x : 0.01 * x; }, [](double x) { return x > 0 ? 1.0 : 0.01; }};
    case ActivationId::relu6:
      return {[](double x) { return std::min(std::max(x, 0.0), 6.0); },
              [](double x) { return x > 0 && x < 6 ? 1.0 : 0.0; }};
    case ActivationId::hardswish:
      return {[](double x) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; },
              [](double x) { return x < -3 ? 0.0 : x < 3 ? x / 3 + 0.5 : 1.0; }};
    case ActivationId::gelu:
      return {[](double x) { return x * phi_cdf(x); },
              [](double x) { return phi_cdf(x) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); }};
    case ActivationId::silu:
      return {[](double x) { return x * sigmoid(x); },
              [](double x) { return sigmoid(x) * (1 + x * (1 - sigmoid(x))); }};
    case ActivationId::sigmoid:
      return {[](double x) { return sigmoid(x); }, [](double x) { return sigmoid(x) * (1 - sigmoid(x)); }};
    case ActivationId::tanh:
      return {[](double x) { return std::tanh(x); }, [](double x) { return 1 - std::tanh(x) * std::tanh(x); }};
    case ActivationId::selu: return elu(kSeluAlpha, kSeluScale);
    case ActivationId::softplus:
      return {softplus, [](double x) { return x > 20 ? 1.0 : sigmoid(x); }};
    case ActivationId::elu: return elu(1.0, 1.0);
    case ActivationId::mish:
      return {[=](double x) { return x * std::tanh(softplus(x)); },
              [=](double x) {
                const double t = std::tanh(std::log1p(std::exp(x)));
                return t + x * sigmoid(x) * (1 - t * t);
              }};
    case ActivationId::gelu_tanh: {
      constexpr double c = 0.7978845608028654, a = 0.044715;
      return {[=](double x) { return 0.5 * x * (1 + std::tanh(c * (x + a * x * x * x))); },
              [=](double x) {
                const double t = std::tanh(c * (x + a * x * x * x));
                return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x);
              }};
    }
  }
  return {};
}

std::vector<float> map(const std::vector<float>& x, const std::function<double(double)>& f) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(f(x[i]));
  return out;
}

TEST(BackendPointwise, EveryActivationAndDerivativeMatchesTheDoubleReference) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const Tensor host = host_random({2, 32, 3, 5}, 3, -5.0f, 5.0f);
    const Tensor grad_host = host_random({2, 32, 3, 5}, 4);
    const std::vector<float> xv = host.to_vector(), gv = grad_host.to_vector();
    for (Layout layout : {Layout::Plain, Layout::nChw16c, Layout::NHWC}) {
      const Tensor x = b->to_layout(host.to(b->device()), layout);
      const Tensor g = b->to_layout(grad_host.to(b->device()), layout);
      for (int k = 0; k < kNumActivations; ++k) {
        const auto id = static_cast<ActivationId>(k);
        const Pointwise& fn = pointwise_by_id(id);
        ASSERT_EQ(fn.id, id);
        const std::string what = std::string(fn.name) + " " + std::string(layout_name(layout));
        const Reference ref = reference(id);
        const Tensor y = b->pointwise_forward(id, x);
        EXPECT_EQ(y.layout(), layout) << what;
        expect_close(host_values(y), map(xv, ref.f), 2e-5f, 1e-6f, what + " f");
        expect_close(host_values(b->pointwise_derivative(id, x, false)), map(xv, ref.df), 2e-5f, 1e-6f, what + " f'");
        std::vector<float> want(xv.size());
        for (size_t i = 0; i < xv.size(); ++i) want[i] = static_cast<float>(gv[i] * ref.df(xv[i]));
        expect_close(host_values(b->pointwise_backward(id, x, g, false)), want, 2e-5f, 1e-6f, what + " grad f'");
        if (fn.derivative_from_output) {
          expect_close(host_values(b->pointwise_derivative(id, y, true)), map(xv, ref.df), 2e-5f, 1e-6f,
                       what + " f' from y");
          expect_close(host_values(b->pointwise_backward(id, y, g, true)), want, 2e-5f, 1e-6f, what + " grad f' from y");
        } else {
          EXPECT_THROW(b->pointwise_derivative(id, y, true), Error) << what;
        }
      }
    }
  }
}

// The broadcast of a and b, numpy-style, computed element by element in double.
std::vector<float> broadcast_reference(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f,
                                       Shape* out_shape) {
  const auto &da = a.shape().dims(), &db = b.shape().dims();
  const size_t r = std::max(da.size(), db.size());
  auto dim = [r](const std::vector<int64_t>& d, size_t i) { return i + d.size() < r ? 1 : d[i + d.size() - r]; };
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) out[i] = std::max(dim(da, i), dim(db, i));
  *out_shape = Shape(out);
  const std::vector<float> av = a.to_vector(), bv = b.to_vector();
  std::vector<float> res(static_cast<size_t>(out_shape->numel()));
  for (int64_t flat = 0; flat < out_shape->numel(); ++flat) {
    int64_t rest = flat, ia = 0, ib = 0, sa = 1, sb = 1;
    for (size_t i = r; i-- > 0;) {
      const int64_t idx = rest % out[i];
      rest /= out[i];
      if (dim(da, i) != 1) ia += idx * sa;
      if (dim(db, i) != 1) ib += idx * sb;
      sa *= dim(da, i);
      sb *= dim(db, i);
    }
    res[static_cast<size_t>(flat)] = static_cast<float>(f(av[static_cast<size_t>(ia)], bv[static_cast<size_t>(ib)]));
  }
  return res;
}

TEST(BackendElementwise, BinaryOpsMatchTheReferenceWithAndWithoutBroadcasting) {
  const std::vector<std::pair<BinaryOp, std::function<double(double, double)>>> ops{
      {BinaryOp::Add, [](double x, double y) { return x + y; }},
      {BinaryOp::Sub, [](double x, double y) { return x - y; }},
      {BinaryOp::Mul, [](double x, double y) { return x * y; }},
      {BinaryOp::Div, [](double x, double y) { return x / y; }}};
  const std::vector<std::pair<Shape, Shape>> shapes{{{2, 32, 3, 5}, {2, 32, 3, 5}}, {{2, 32, 1, 1}, {2, 32, 3, 5}},
                                                    {{2, 32, 3, 5}, {2, 32, 1, 1}}, {{3, 5}, {2, 4, 3, 5}},
                                                    {{3, 1}, {1, 4}},           {{1}, {2, 3}},
                                                    {{2, 1, 5}, {2, 3, 1}}};
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    int seed = 0;
    for (const auto& [sa, sb] : shapes) {
      const Tensor ha = host_random(sa, ++seed), hb = host_random(sb, ++seed, 0.5f, 2.0f);
      for (const auto& [op, f] : ops) {
        Shape out_shape;
        const std::vector<float> want = broadcast_reference(ha, hb, f, &out_shape);
        const Tensor y = b->binary(op, ha.to(b->device()), hb.to(b->device()));
        const std::string what = sa.str() + " op " + std::to_string(static_cast<int>(op)) + " " + sb.str();
        EXPECT_EQ(y.shape(), out_shape) << what;
        expect_close(host_values(y), want, 1e-6f, 1e-7f, what);
      }
    }
    // Same shape in different layouts: out keeps a's layout, b is read in its own.
    const Tensor ha = host_random({2, 32, 3, 5}, 40), hb = host_random({2, 32, 3, 5}, 41);
    const Tensor y = b->binary(BinaryOp::Mul, b->to_layout(ha.to(b->device()), Layout::nChw16c), hb.to(b->device()));
    EXPECT_EQ(y.layout(), Layout::nChw16c);
    Shape s;
    expect_close(host_values(y), broadcast_reference(ha, hb, [](double x, double z) { return x * z; }, &s), 1e-6f,
                 1e-7f, "blocked * plain");
    // A blocked or NHWC tensor against a per-channel one (squeeze-and-excitation's scale), per
    // sample or shared, or against one value per sample (drop path's noise), either side: the CPU
    // computes it in that layout.
    for (Layout blocked : {Layout::nChw16c, Layout::nChw8c, Layout::NHWC})
      for (const Shape& vs : {Shape{2, 32, 1, 1}, Shape{1, 32, 1, 1}, Shape{2, 1, 1, 1}}) {
        const Tensor hv = host_random(vs, 42, 0.5f, 1.5f);
        const Tensor x = b->to_layout(ha.to(b->device()), blocked), v = hv.to(b->device());
        for (const auto& [op, f] : ops) {
          const std::string what = fmt::format("{} {} op {}", layout_name(blocked), vs.str(), static_cast<int>(op));
          const Tensor xv = b->binary(op, x, v), vx = b->binary(op, v, x);
          if (b->device().is_cpu()) {
            EXPECT_EQ(xv.layout(), blocked) << what;
            EXPECT_EQ(vx.layout(), blocked) << what;
          }
          expect_close(host_values(xv), broadcast_reference(ha, hv, f, &s), 1e-6f, 1e-7f, what + " x, v");
          expect_close(host_values(vx), broadcast_reference(hv, ha, f, &s), 1e-6f, 1e-7f, what + " v, x");
        }
      }
    // f64 operands.
    const Tensor da = ha.to(DType::f64).to(b->device()), db = hb.to(DType::f64).to(b->device());
    const Tensor d = b->binary(BinaryOp::Add, da, db);
    EXPECT_EQ(d.dtype(), DType::f64);
    expect_close(host_values(d), broadcast_reference(ha, hb, [](double x, double z) { return x + z; }, &s), 1e-7f,
                 0.0f, "f64 add");
    // Shapes that do not broadcast, and mixed dtypes, are errors naming the op.
    EXPECT_NE(testing::message_of([&] { b->binary(BinaryOp::Add, Tensor::zeros({2, 3}), Tensor::zeros({4, 3})); })
                  .find("add: shapes (2, 3) and (4, 3) do not broadcast"),
              std::string::npos);
    EXPECT_THROW(b->binary(BinaryOp::Add, da, ha.to(b->device())), Error);
  }
}

// Sums over the innermost dims ((N, C, H, W) -> (N, C, 1, 1) as in squeeze-excitation, and to
// (C, 1, 1), where several rows add into one output) on a tensor large enough to run in parallel:
// each output within f32 rounding of a double sum, and the same bits on 1 and 2 threads.
TEST(BackendElementwise, ReduceSumToOverInnerDimsMatchesTheDoubleSumOnAnyThreadCount) {
  const Tensor hx = host_random({8, 48, 17, 13}, 60);  // (N, C, H, W): 84864 elements
  const std::vector<float> xv = hx.to_vector();
  const int threads = num_threads();
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const Tensor x = hx.to(b->device());
    for (const Shape& to : {Shape{8, 48, 1, 1}, Shape{48, 1, 1}}) {
      const int64_t plane = 17 * 13, outputs = to.numel();
      std::vector<double> want(static_cast<size_t>(outputs), 0.0);
      for (size_t i = 0; i < xv.size(); ++i) want[(i / static_cast<size_t>(plane)) % static_cast<size_t>(outputs)] += xv[i];
      set_num_threads(1);
      const std::vector<float> one = host_values(b->reduce_sum_to(x, to));
      set_num_threads(2);
      const std::vector<float> two = host_values(b->reduce_sum_to(x, to));
      set_num_threads(threads);
      expect_close(one, std::vector<float>(want.begin(), want.end()), 1e-6f, 1e-6f, "reduce_sum_to " + to.str());
      EXPECT_EQ(one, two) << to.str();
    }
  }
}

// A product's gradient for its broadcast operand, sum over (H, W) of g * a: within f32 rounding of
// the double sum of the products, for an f32 or bf16 a in every layout the tensors come in, the
// same bits on 1 and 2 threads; a shape it does not sum over planes gives the product's sum too.
TEST(BackendElementwise, ReduceSumOfProductToIsTheSumOfTheProductsInEveryLayout) {
  const Tensor hg = host_random({8, 48, 9, 7}, 61), ha = host_random({8, 48, 9, 7}, 62);
  const int threads = num_threads();
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    for (DType dtype : {DType::f32, DType::bf16}) {
      const std::vector<float> gv = hg.to_vector(), av = ha.to(dtype).to(DType::f32).to_vector();
      std::vector<double> want(8 * 48, 0.0);
      for (size_t i = 0; i < gv.size(); ++i) want[i / 63] += static_cast<double>(gv[i] * av[i]);
      for (Layout layout : {Layout::Plain, Layout::NHWC, Layout::nChw16c, Layout::nChw8c}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(layout_name(layout)));
        const Tensor g = b->to_layout(hg.to(b->device()), layout);
        const Tensor a = b->to_layout(ha.to(b->device()), layout).to(dtype);
        set_num_threads(1);
        const Tensor one = b->reduce_sum_of_product_to(g, a, Shape{8, 48, 1, 1});
        set_num_threads(2);
        const Tensor two = b->reduce_sum_of_product_to(g, a, Shape{8, 48, 1, 1});
        set_num_threads(threads);
        EXPECT_EQ(one.shape(), Shape({8, 48, 1, 1}));
        expect_close(host_values(one), std::vector<float>(want.begin(), want.end()), 1e-5f, 1e-5f, "plane sums");
        EXPECT_EQ(host_values(one), host_values(two));
      }
      // Summed over the batch too: (48, 1, 1), the product and then its sum.
      std::vector<double> per_channel(48, 0.0);
      for (size_t i = 0; i < want.size(); ++i) per_channel[i % 48] += want[i];
      const Tensor c = b->reduce_sum_of_product_to(hg.to(b->device()), ha.to(b->device()).to(dtype), Shape{48, 1, 1});
      expect_close(host_values(c), std::vector<float>(per_channel.begin(), per_channel.end()), 1e-5f, 1e-5f, "channel sums");
    }
  }
}

TEST(BackendElementwise, ScaleAccumulateAndReductionsMatchTheReference) {
  PACKRAT_FOR_EACH_BACKEND(b) {
    DeviceScope on(b->device());
    const Tensor hx = host_random({2, 32, 3, 5}, 50), hy = host_random({2, 32, 3, 5}, 51);
    const std::vector<float> xv = hx.to_vector(), yv = hy.to_vector();
    const Tensor x = b->to_layout(hx.to(b->device()), Layout::nChw16c);

    expect_close(host_values(b->scale(x, 0.3)), map(xv, [](double v) { return v * 0.3f; }), 1e-6f, 0.0f, "scale");
    EXPECT_EQ(b->scale(x, 0.3).layout(), Layout::nChw16c);

    Tensor acc = hx.to(b->device()).clone();  // to() is hx itself on the CPU
    const int64_t version = acc.version();
    b->accumulate(acc, b->to_layout(hy.to(b->device()), Layout::nChw16c));
    std::vector<float> sum(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) sum[i] = xv[i] + yv[i];
    expect_close(host_values(acc), sum, 0.0f, 0.0f, "accumulate");
    EXPECT_GT(acc.version(), version);

    double s = 0, sq = 0;
    for (float v : xv) {
      s += v;
      sq += static_cast<double>(v) * v;
    }
    EXPECT_NEAR(b->reduce_sum(x), s, 1e-9 * xv.size());
    EXPECT_NEAR(b->reduce_sum_squares(x), sq, 1e-9 * sq);

    // The reverse of broadcasting: sums over the stretched dims.
    for (const Shape& to : {Shape{2, 32, 1, 1}, Shape{32, 1, 1}, Shape{3, 5}, Shape{32, 1, 5}, Shape{1}, Shape{2, 32, 3, 5}}) {
      Shape out_shape;
      // Each element of `to` collects the x elements that broadcast onto it: broadcast the
      // element indices of `to` against x to find where each x element goes.
      std::vector<double> want(static_cast<size_t>(to.numel()), 0.0);
      const std::vector<float> idx = [&] {
        DeviceScope host(Device::cpu());  // the index map is host data whichever backend runs
        Tensor ids = Tensor::empty(to);
        for (int64_t i = 0; i < to.numel(); ++i) ids.data<float>()[i] = static_cast<float>(i);
        return broadcast_reference(ids, hx, [](double id, double) { return id; }, &out_shape);
      }();
      for (size_t i = 0; i < xv.size(); ++i) want[static_cast<size_t>(idx[i])] += xv[i];
      const Tensor r = b->reduce_sum_to(x, to);
      EXPECT_EQ(r.shape(), to);
      expect_close(host_values(r), std::vector<float>(want.begin(), want.end()), 1e-5f, 1e-6f, "reduce_sum_to " + to.str());
    }
    EXPECT_THROW(b->reduce_sum_to(x, Shape{3, 4}), Error);
    const Tensor r64 = b->reduce_sum_to(hx.to(DType::f64).to(b->device()), Shape{1});
    EXPECT_EQ(r64.dtype(), DType::f64);
    EXPECT_NEAR(host_values(r64)[0], s, 1e-5);  // host_values rounds to f32
  }
}

}  // namespace
}  // namespace packrat
