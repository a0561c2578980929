// Recomputation of every block (memory.recompute: [blocks]) changes nothing a step computes:
// with the FP32 store, the loss and every parameter gradient are the same bits, the batchnorm
// running statistics and every mask stream end where they end without it, on the CPU and on
// the emulated GPU; only the segments' inputs are kept, and nothing is left after the step.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/tape.h"
#include "core/backend.h"
#include "experiments/lib/text_task.h"
#include "experiments/lib/train_loop.h"
#include "layers/recompute.h"
#include "models/registry.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/emulated_gpu.h"
#include "tests/support/errors.h"

namespace packrat {
namespace {

struct StepResult {
  std::vector<float> loss;
  std::vector<std::vector<float>> grads, buffers;
  std::vector<MaskStream> streams;
  std::vector<SavedRecord> saved;  // after the forward
};

ModelSpec spec_of(const std::string& arch) {
  ModelSpec s;
  s.arch = arch;
  s.seed = 3;
  s.num_classes = takes_text(arch) ? 32 : 10;
  s.in_channels = 3;
  // Random masks inside the blocks, so that their replay is checked.
  if (arch.rfind("vit", 0) == 0) s.dropout = 0.1, s.attention_dropout = 0.1;
  if (arch.rfind("gpt", 0) == 0) s.dropout = 0.1;
  if (arch.rfind("efficientnet", 0) == 0) s.stochastic_depth = 0.3;
  // BERT: the masked-token head (logits per position, as the GPT's), memory-efficient attention
  // with dropout, and key padding wherever a token 0 falls.
  if (arch.rfind("bert", 0) == 0) s.text_head = "tokens", s.attention = "memory_efficient";
  return s;
}

// One forward + backward of `model` on `device` under the FP32 store.
StepResult step(Module& model, const ModelSpec& spec, Device device) {
  StorePolicySpec fp32;
  RulePolicy policy(fp32);
  PolicyScope scope(policy);
  policy.begin_step(0);
  model.train();
  const bool text = takes_text(spec.arch);
  const SyntheticBatch b = text ? synthetic_token_batch(4, 16, spec.num_classes, 7)
                                : synthetic_batch(4, 3, 32, 32, spec.num_classes, 7);
  StepResult r;
  {
    TagScope tag(MemTag::Activation);
    const Tensor loss = task_loss(model(b.images.to(device)), b.labels.to(device), 0.0f);
    r.loss = loss.to(Device::cpu()).to_vector();
    r.saved = policy.describe();
    backward(loss);
  }
  for (auto& [name, p] : model.named_parameters()) {
    r.grads.push_back(p.grad().defined() ? p.grad().to(Device::cpu()).to_vector() : std::vector<float>{});
    p.zero_grad();
  }
  for (auto& [name, t] : model.named_buffers())
    if (t.dtype() == DType::f32) r.buffers.push_back(t.to(Device::cpu()).to_vector());
  for (auto& [name, s] : model.named_mask_streams()) r.streams.push_back(*s);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The model's step without recomputation, then from the same state with every block recomputed.
void expect_recompute_changes_nothing(const std::string& arch, Device device) {
  SCOPED_TRACE(arch);
  const ModelSpec spec = spec_of(arch);
  DeviceScope on(device);
  std::shared_ptr<Module> model = make_model(spec);
  std::vector<Tensor> buffers_before;
  for (auto& [name, t] : model->named_buffers()) buffers_before.push_back(t.clone());
  std::vector<MaskStream> streams_before;
  for (auto& [name, s] : model->named_mask_streams()) streams_before.push_back(*s);

  const StepResult plain = step(*model, spec, device);
  size_t i = 0;
  for (auto& [name, t] : model->named_buffers()) backend_of(t).copy(buffers_before[i++], t);
  i = 0;
  for (auto& [name, s] : model->named_mask_streams()) *s = streams_before[i++];

  const std::vector<std::string> segments = apply_recompute(*model, {"blocks"});
  ASSERT_GE(segments.size(), 2u);
  reset_recompute_stats();
  const StepResult recomputed = step(*model, spec, device);
  apply_recompute(*model, {});
  EXPECT_EQ(recompute_stats().recomputes, static_cast<int64_t>(segments.size()));

  EXPECT_TRUE(same_bits(recomputed.loss, plain.loss)) << recomputed.loss[0] << " vs " << plain.loss[0];
  ASSERT_EQ(recomputed.grads.size(), plain.grads.size());
  for (size_t k = 0; k < plain.grads.size(); ++k)
    EXPECT_TRUE(same_bits(recomputed.grads[k], plain.grads[k])) << "gradient " << model->named_parameters()[k].first;
  ASSERT_EQ(recomputed.buffers.size(), plain.buffers.size());
  for (size_t k = 0; k < plain.buffers.size(); ++k) EXPECT_TRUE(same_bits(recomputed.buffers[k], plain.buffers[k]));
  ASSERT_EQ(recomputed.streams.size(), plain.streams.size());
  int64_t drawn = 0;  // streams that drew masks in the step (a drop probability 0 draws none)
  for (size_t k = 0; k < plain.streams.size(); ++k) {
    EXPECT_EQ(recomputed.streams[k].calls, plain.streams[k].calls);
    drawn += plain.streams[k].calls != streams_before[k].calls;
  }
  if (!plain.streams.empty()) {
    EXPECT_GE(drawn, 2);  // (ResNets have none)
  }
  // Kept: each segment's input once, as `checkpoint` under the block's name; nothing recorded
  // inside a block.
  int64_t checkpoints = 0;
  for (const SavedRecord& r : recomputed.saved) {
    if (r.op == "checkpoint") {
      ++checkpoints;
      EXPECT_NE(std::find(segments.begin(), segments.end(), r.layer), segments.end()) << r.layer;
      continue;
    }
    for (const std::string& s : segments) EXPECT_NE(r.layer.rfind(s + ".", 0), 0u) << r.op << " " << r.layer;
  }
  EXPECT_EQ(checkpoints, static_cast<int64_t>(segments.size()));
  int64_t plain_bytes = 0, recomputed_bytes = 0;
  for (const SavedRecord& r : plain.saved) plain_bytes += r.shared ? 0 : r.bytes;
  for (const SavedRecord& r : recomputed.saved) recomputed_bytes += r.shared ? 0 : r.bytes;
  EXPECT_LT(recomputed_bytes, plain_bytes / 2);
  EXPECT_EQ(Allocator::of(device).current(MemTag::Saved), 0);
}

class RecomputeModels : public ::testing::TestWithParam<std::string> {};

TEST_P(RecomputeModels, EveryBlockRecomputedGivesTheSameStepOnTheCpu) {
  set_conv_algorithm(ConvAlgorithm::Deterministic);
  expect_recompute_changes_nothing(GetParam(), Device::cpu());
  set_conv_algorithm(ConvAlgorithm::Auto);
}

TEST_P(RecomputeModels, EveryBlockRecomputedGivesTheSameStepOnTheEmulatedGpu) {
  testing::EmulatedGpu gpu;
  expect_recompute_changes_nothing(GetParam(), testing::EmulatedGpu::device());
}

INSTANTIATE_TEST_SUITE_P(Models, RecomputeModels,
                         ::testing::Values("resnet20", "efficientnet_b0_small", "vit_tiny_cifar", "gpt_tiny",
                                           "bert_tiny"),
                         [](const auto& info) { return info.param; });

TEST(RecomputeConfig, AGlobThatMatchesNoModuleNamesTheKeyAndTheTopLevelModules) {
  ModelSpec spec = spec_of("resnet20");
  std::shared_ptr<Module> model = make_model(spec);
  const std::string m = testing::message_of([&] { apply_recompute(*model, {"layer1.*", "stage*"}); });
  EXPECT_NE(m.find("memory.recompute"), std::string::npos) << m;
  EXPECT_NE(m.find("'stage*'"), std::string::npos) << m;
  EXPECT_NE(m.find("conv1, bn1, act, layer1, layer2, layer3, avgpool, fc"), std::string::npos) << m;
}

TEST(RecomputeConfig, TheOutermostMatchWins) {
  std::shared_ptr<Module> model = make_model(spec_of("resnet20"));
  EXPECT_EQ(apply_recompute(*model, {"layer*"}), (std::vector<std::string>{"layer1", "layer2", "layer3"}));
  const std::vector<std::string> blocks = apply_recompute(*model, {"layer2.*"});
  EXPECT_EQ(blocks, (std::vector<std::string>{"layer2.0", "layer2.1", "layer2.2"}));
  EXPECT_EQ(recomputed_modules(*model), blocks);
  EXPECT_TRUE(apply_recompute(*model, {}).empty());
  EXPECT_TRUE(recomputed_modules(*model).empty());
}

}  // namespace
}  // namespace packrat
