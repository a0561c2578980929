#include <gtest/gtest.h>

#include <cstring>

#include "autograd/tape.h"
#include "layers/batchnorm2d.h"
#include "layers/sequential.h"
#include "models/resnet_blocks.h"
#include "tests/models/golden_file.h"

using namespace packrat;
using namespace packrat::testing;

namespace {

// Copies the golden parameters into the block, runs forward and backward, compares everything.
void check_block(Module& block, const std::map<std::string, std::vector<float>>& g, const Shape& in,
                 const Shape& out) {
  for (auto& [name, p] : block.named_parameters()) {
    const auto& v = golden_at(g, "param." + name);
    ASSERT_EQ(static_cast<int64_t>(v.size()), p.numel()) << name;
    std::memcpy(p.raw(), v.data(), p.nbytes());
  }
  Tensor x = golden_tensor(g, "x", in);
  x.set_requires_grad(true);
  Tensor y = block(x);
  ASSERT_EQ(y.shape(), out);
  expect_close(y.to_vector(), golden_at(g, "y"), 1e-4f, 1e-4f, "y");
  backward(y, golden_tensor(g, "gy", out).to_layout(y.layout()));
  expect_close(x.grad().to_vector(), golden_at(g, "gx"), 2e-4f, 1e-3f, "grad x");
  for (auto& [name, p] : block.named_parameters())
    expect_close(p.grad().to_vector(), golden_at(g, "grad." + name), 2e-4f, 1e-3f, "grad " + name);
  for (auto& [name, b] : block.named_buffers())
    if (b.dtype() == DType::f32) expect_close(b.to_vector(), golden_at(g, "buffer." + name), 1e-5f, 1e-4f, name);
}

std::shared_ptr<Sequential> downsample(int64_t in, int64_t out, init::SeedSequence& seeds) {
  auto ds = std::make_shared<Sequential>();
  ds->add(make_conv(in, out, 1, 2, 0, ConvInit::KaimingNormalFanOut, seeds.next()));
  ds->add(std::make_shared<BatchNorm2d>(out));
  return ds;
}

}  // namespace

// torchvision's blocks (with their ReLU swapped for GELU), stride 2, with a downsample, in train
// mode: output, input gradient, parameter gradients and running statistics.
TEST(ModelBlock, BasicBlockMatchesTorchvision) {
  init::SeedSequence seeds(0);
  BasicBlock block(8, 16, 2, BlockShortcut{"downsample", downsample(8, 16, seeds)}, "gelu",
                   ConvInit::KaimingNormalFanOut, seeds);
  check_block(block, read_golden_values("basic_block.txt"), {2, 8, 6, 6}, {2, 16, 3, 3});
}

TEST(ModelBlock, BottleneckMatchesTorchvision) {
  init::SeedSequence seeds(0);
  Bottleneck block(16, 4, 2, BlockShortcut{"downsample", downsample(16, 16, seeds)}, "gelu",
                   ConvInit::KaimingNormalFanOut, seeds);
  check_block(block, read_golden_values("bottleneck_block.txt"), {2, 16, 6, 6}, {2, 16, 3, 3});
}
