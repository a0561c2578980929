// How far compressed storage moves one batch's EfficientNet gradient from FP32's (cosine over all
// parameter gradients, the small B0 with dropout and drop path off so that only storage differs).
// The finding behind configs/efficientnet_fmnist_2bit.yaml: SiLU's derivative read off a 2-bit
// per-group input is biased and noisy enough to stall training, its 2-bit few-bit index is not.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "models/efficientnet.h"
#include "quant/rule_policy.h"
#include "tests/support/gradcheck.h"

using namespace packrat;
using packrat::testing::random_tensor;

namespace {

struct Fixture {
  std::shared_ptr<EfficientNet> model;
  Tensor x, y;
  std::vector<float> fp32;
};

std::vector<float> gradient(Fixture& f, StorePolicy& p) {
  PolicyScope scope(p);
  p.begin_step(1);
  f.model->zero_grad();
  backward(ops::cross_entropy((*f.model)(f.x), f.y));
  std::vector<float> g;
  for (auto& [n, t] : f.model->named_parameters()) {
    const auto v = t.grad().to_vector();
    g.insert(g.end(), v.begin(), v.end());
  }
  return g;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

Fixture& fixture() {
  static Fixture f = [] {
    Fixture f;
    EfficientNetConfig c = efficientnet_b0_config();
    c.width_mult = c.depth_mult = 0.5;
    c.stem = "cifar";
    c.in_channels = 1;
    c.num_classes = 10;
    c.dropout = c.stochastic_depth_prob = 0.0f;
    f.model = std::make_shared<EfficientNet>(c);
    TagScope tag(MemTag::Data);
    f.x = random_tensor({32, 1, 28, 28}, 3);
    f.y = Tensor::empty({32}, DType::i64);
    for (int i = 0; i < 32; ++i) f.y.data<int64_t>()[i] = i % 10;
    return f;
  }();
  if (f.fp32.empty()) {
    RulePolicy fp32(StorePolicySpec{});
    f.fp32 = gradient(f, fp32);
  }
  return f;
}

// The cosine with FP32's gradient when `ops` (all when empty) are kept by `scheme`.
double cosine_under(const std::string& scheme, const std::string& bits, std::vector<std::string> ops) {
  StorePolicySpec spec;
  if (ops.empty()) {
    spec.default_scheme.scheme = scheme;
    spec.default_scheme.options = {{"bits", bits}};
  } else {
    StoreRule r;
    r.ops = std::move(ops);
    r.spec.scheme = scheme;
    r.spec.options = {{"bits", bits}};
    spec.rules.push_back(r);
  }
  RulePolicy p(spec);
  return cosine(gradient(fixture(), p), fixture().fp32);
}

}  // namespace

TEST(EfficientNetGradient, FewbitSiluKeepsTheGradientWhere2BitPerGroupSiluLosesIt) {
  const double silu_actnn2 = cosine_under("actnn", "2", {"silu"});
  const double silu_fewbit2 = cosine_under("fewbit", "2", {"silu"});
  EXPECT_LT(silu_actnn2, 0.6);   // measured 0.33
  EXPECT_GT(silu_fewbit2, 0.85);  // measured 0.91
  // The other parts at 2 bits per group each keep most of the direction.
  EXPECT_GT(cosine_under("actnn", "2", {"sigmoid"}), 0.95);
  EXPECT_GT(cosine_under("actnn", "2", {"mul"}), 0.8);
  EXPECT_GT(cosine_under("actnn", "2", {"conv2d"}), 0.7);
  // 4 bits per group everywhere, SiLU included.
  EXPECT_GT(cosine_under("actnn", "4", {}), 0.85);  // measured 0.94
}
