// model.arch: sequential against PyTorch (tests/golden/make_layers_golden.py): the same layer list,
// from the same YAML text, built as an nn.Sequential there and through the config and the session
// here. Every parameter and buffer name matches both ways (strict=True), in PyTorch's order; the
// train-mode logits, loss, gradients and updated batchnorm statistics, and the eval-mode logits,
// match within f32 tolerance.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "experiments/lib/config.h"
#include "experiments/lib/safetensors.h"
#include "experiments/lib/session.h"
#include "layers/dropout.h"
#include "tests/models/golden_file.h"

using namespace packrat;
using packrat::testing::expect_close;

namespace {

// make_layers_golden.py's LAYERS_YAML, as a config's model.layers.
const char* kGoldenConfig =
    "data: {dataset: fashion_mnist}\n"
    "model:\n"
    "  arch: sequential\n"
    "  layers:\n"
    "    - conv2d(8, 3, padding=1)\n"
    "    - batchnorm2d\n"
    "    - relu\n"
    "    - maxpool2d(2)\n"
    "    - residual: [conv2d(8, 3, padding=1, bias=false), batchnorm2d, gelu, conv2d(8, 3, padding=1), batchnorm2d]\n"
    "    - silu\n"
    "    - conv2d(16, 3, stride=2, padding=1)\n"
    "    - batchnorm2d\n"
    "    - hardswish\n"
    "    - avgpool2d(3, stride=1, padding=1)\n"
    "    - adaptive_avgpool2d(3)\n"
    "    - flatten\n"
    "    - linear(32)\n"
    "    - layernorm\n"
    "    - tanh\n"
    "    - dropout(0.1)\n"
    "    - linear(10)\n";

// The golden's names under `prefix` ("param.", "buffer."), in file order.
std::vector<std::string> golden_names(const SafetensorsFile& f, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind(prefix, 0) == 0) out.push_back(name.substr(prefix.size()));
  return out;
}

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

// Copies golden `prefix`<name> into every tensor of `named` (same shape and bytes).
void load_named(const std::vector<std::pair<std::string, Tensor>>& named, const SafetensorsFile& f,
                const std::string& prefix) {
  for (auto [name, t] : named) {
    const Tensor* g = f.find(prefix + name);
    ASSERT_NE(g, nullptr) << "no golden " << prefix << name;
    ASSERT_EQ(g->numel(), t.numel()) << name;
    ASSERT_EQ(g->nbytes(), t.nbytes()) << name;
    std::memcpy(t.raw(), g->raw(), t.nbytes());
    t.bump_version();
  }
}

}  // namespace

TEST(LayersGolden, TheConfigsNnSequentialMatchesPyTorch) {
  const SafetensorsFile f = read_safetensors(packrat::testing::golden_path("layers_golden.safetensors"));
  const Config c = parse_config(kGoldenConfig, "layers.yaml");
  const Session s = make_session(c, synthetic_input_spec(c));  // (N, 1, 28, 28), 10 classes
  Module& model = *s.model;
  // strict=True both ways: the same names, parameters in the same order.
  EXPECT_EQ(names_of(model.named_parameters()), golden_names(f, "param."));
  const std::vector<std::string> ours = names_of(model.named_buffers()), theirs = golden_names(f, "buffer.");
  EXPECT_EQ(std::set<std::string>(ours.begin(), ours.end()), std::set<std::string>(theirs.begin(), theirs.end()));
  load_named(model.named_parameters(), f, "param.");
  load_named(model.named_buffers(), f, "buffer.");
  if (::testing::Test::HasFatalFailure()) return;

  model.train();
  for (auto& [name, m] : model.named_modules())
    if (dynamic_cast<Dropout*>(m)) m->eval();  // identity, as the golden's
  const Tensor logits = model(*f.find("input"));
  const Tensor loss = ops::cross_entropy(logits, *f.find("targets"));
  expect_close(logits, *f.find("logits.train"), 1e-4f, 1e-4f, "logits (train)");
  expect_close(loss, *f.find("loss.train"), 1e-5f, 1e-5f, "loss");
  backward(loss);
  for (auto& [name, p] : model.named_parameters())
    expect_close(p.grad(), *f.find("grad." + name), 1e-4f, 1e-3f, "grad " + name);
  for (auto& [name, b] : model.named_buffers()) {
    const Tensor& want = *f.find("buffer_after." + name);
    if (b.dtype() == DType::f32) {
      expect_close(b, want, 1e-5f, 1e-4f, "buffer " + name);
    } else {
      ASSERT_EQ(b.nbytes(), want.nbytes()) << name;
      EXPECT_EQ(std::memcmp(b.raw(), want.raw(), b.nbytes()), 0) << name;
    }
  }
  model.zero_grad();

  model.eval();
  NoGradScope no_grad;
  expect_close(model(*f.find("input")), *f.find("logits.eval"), 1e-4f, 1e-4f, "logits (eval)");
}
