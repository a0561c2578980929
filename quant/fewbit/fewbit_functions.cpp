// The built-in activations for the few-bit solver: f and f' in double precision, with the points
// where f' jumps or kinks (fewbit_solver.h: FewbitFunction). The list, and which are even or
// steps, is core/activation_id.h's; each activation's f64 math is here, as fewbit_math::<name>_f,
// <name>_df and <name>_breaks (a new activation without them does not compile).
#include <algorithm>
#include <cmath>

#include "autograd/pointwise.h"
#include "core/activation_id.h"
#include "core/error.h"
#include "quant/fewbit/fewbit_solver.h"

namespace packrat {

namespace fewbit_math {
namespace {

double sigmoid_f(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}
double normal_pdf(double x) { return std::exp(-0.5 * x * x) * 0.3989422804014327; }
double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.7071067811865476); }
double softplus_f(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

constexpr double kSeluScale = 1.0507009873554804934193349852946;
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kLeakySlope = 0.01;
constexpr double kGeluTanhC = 0.7978845608028654, kGeluTanhA = 0.044715;  // sqrt(2/pi), cubic term

double relu_f(double x) { return x > 0 ? x : 0.0; }
double relu_df(double x) { return x > 0 ? 1.0 : 0.0; }
std::vector<double> relu_breaks() { return {0.0}; }

double leaky_relu_f(double x) { return x > 0 ? x : kLeakySlope * x; }
double leaky_relu_df(double x) { return x > 0 ? 1.0 : kLeakySlope; }
std::vector<double> leaky_relu_breaks() { return {0.0}; }

double relu6_f(double x) { return std::min(std::max(x, 0.0), 6.0); }
double relu6_df(double x) { return x > 0 && x < 6 ? 1.0 : 0.0; }
std::vector<double> relu6_breaks() { return {0.0, 6.0}; }

double hardswish_f(double x) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6.0; }
double hardswish_df(double x) { return x < -3 ? 0.0 : (x <= 3 ? x / 3 + 0.5 : 1.0); }
std::vector<double> hardswish_breaks() { return {-3.0, 3.0}; }

double gelu_f(double x) { return x * normal_cdf(x); }
double gelu_df(double x) { return normal_cdf(x) + x * normal_pdf(x); }
std::vector<double> gelu_breaks() { return {}; }

double silu_f(double x) { return x * sigmoid_f(x); }
double silu_df(double x) {
  const double s = sigmoid_f(x);
  return s * (1 + x * (1 - s));
}
std::vector<double> silu_breaks() { return {}; }

double sigmoid_df(double x) {
  const double s = sigmoid_f(x);
  return s * (1 - s);
}
std::vector<double> sigmoid_breaks() { return {}; }

double tanh_f(double x) { return std::tanh(x); }
double tanh_df(double x) {
  const double t = std::tanh(x);
  return 1 - t * t;
}
std::vector<double> tanh_breaks() { return {}; }

double selu_f(double x) { return kSeluScale * (x > 0 ? x : kSeluAlpha * std::expm1(x)); }
double selu_df(double x) { return x > 0 ? kSeluScale : kSeluScale * kSeluAlpha * std::exp(x); }
std::vector<double> selu_breaks() { return {0.0}; }

double softplus_df(double x) { return x > 20.0 ? 1.0 : sigmoid_f(x); }
std::vector<double> softplus_breaks() { return {}; }

double elu_f(double x) { return x > 0 ? x : std::expm1(x); }
double elu_df(double x) { return x > 0 ? 1.0 : std::exp(x); }
std::vector<double> elu_breaks() { return {0.0}; }

double mish_f(double x) { return x * std::tanh(softplus_f(x)); }
double mish_df(double x) {
  const double t = std::tanh(softplus_f(x));
  return t + x * sigmoid_f(x) * (1 - t * t);
}
std::vector<double> mish_breaks() { return {}; }

double gelu_tanh_f(double x) { return 0.5 * x * (1 + std::tanh(kGeluTanhC * (x + kGeluTanhA * x * x * x))); }
double gelu_tanh_df(double x) {
  const double t = std::tanh(kGeluTanhC * (x + kGeluTanhA * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kGeluTanhC * (1 + 3 * kGeluTanhA * x * x);
}
std::vector<double> gelu_tanh_breaks() { return {}; }

}  // namespace
}  // namespace fewbit_math

const std::vector<FewbitFunction>& fewbit_functions() {
#define PACKRAT_FEWBIT_FUNCTION(ID, DERIVATIVE, EVEN, STEP) \
  {#ID, fewbit_math::ID##_f, fewbit_math::ID##_df, EVEN, STEP, fewbit_math::ID##_breaks()},
  static const std::vector<FewbitFunction> fns = {PACKRAT_ACTIVATIONS(PACKRAT_FEWBIT_FUNCTION)};
#undef PACKRAT_FEWBIT_FUNCTION
  return fns;
}

const FewbitFunction* find_fewbit_function(std::string_view name) {
  for (const auto& f : fewbit_functions())
    if (f.name == name) return &f;
  return nullptr;
}

const FewbitFunction& fewbit_function(std::string_view name) {
  if (const auto* f = find_fewbit_function(name)) return *f;
  fail("fewbit: unknown function '{}' (known: {})", name, pointwise_names());  // the same list, in order
}

}  // namespace packrat
