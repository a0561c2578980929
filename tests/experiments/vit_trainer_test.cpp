// The ViT through the trainer: a short run on the fixture images (12x12, one channel: image size
// from the data, patch 4 -> 9 patches), its memory report named by block, and bad sizes and
// presets failing before training with the key named.
#include <gtest/gtest.h>

#include <set>

#include <string>

#include "experiments/lib/run.h"
#include "experiments/lib/session.h"
#include "experiments/lib/train_loop.h"
#include "quant/group/gact_store.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/tiny_config.h"
#include "tests/experiments/run_files.h"
#include "tests/support/errors.h"

using namespace packrat;
using namespace packrat::testing;

namespace {

const std::filesystem::path& vit_fixture_data() {
  static const std::filesystem::path dir = make_idx_dataset("idx_vit", 32, 16);
  return dir;
}

const std::vector<std::string> kVitShortRun = {"model.arch=vit_tiny_fmnist", "train.epochs=1",
                                               "train.steps_per_epoch=2", "optimizer.lr=0.01",
                                               "saved_tensors.rules=[]"};

}  // namespace

TEST(VitTrainer, ShortRunTrainsAndReportsTensorsByBlock) {
  const RunResult r = run_training(tiny_config(vit_fixture_data(), temp_dir("vit_run"), kVitShortRun), quiet());
  ASSERT_EQ(r.epochs.size(), 1u);
  bool attention = false;
  for (const auto& t : r.report.tensors)
    attention = attention || (t.layer == "encoder.layers.encoder_layer_3.self_attention" && t.op == "attention_softmax");
  EXPECT_TRUE(attention);
}

TEST(VitTrainer, BadPatchAndUnknownPresetNameTheKey) {
  std::vector<std::string> sets = kVitShortRun;
  sets.push_back("model.patch_size=5");
  std::string m = message_of([&] { run_training(tiny_config(vit_fixture_data(), temp_dir("vit_bad_patch"), sets), quiet()); });
  EXPECT_TRUE(contains(m, "model.image_size 12 is not divisible by model.patch_size 5")) << m;
  sets = kVitShortRun;
  sets.push_back("model.arch=vit_gigantic");
  m = message_of([&] { run_training(tiny_config(vit_fixture_data(), temp_dir("vit_bad_arch"), sets), quiet()); });
  EXPECT_TRUE(contains(m, "model.arch: unknown architecture 'vit_gigantic'")) << m;
}

// model.attention through the config, and gact-CB2 choosing memory-efficient attention: the
// attention then saves its output and log-sum-exp, never the (T, T) probabilities. (The MLPs are
// recomputed instead of the whole blocks, so the attention's saves show in the report's forward.)
TEST(VitTrainer, AttentionAlgorithmFromTheConfigAndTheGactCB2Preset) {
  auto attention_ops = [](const RunResult& r) {
    std::set<std::string> ops;
    for (const auto& t : r.report.tensors)
      if (t.layer == "encoder.layers.encoder_layer_0.self_attention" && t.op.rfind("attention", 0) == 0)
        ops.insert(t.op);
    return ops;
  };
  const std::set<std::string> efficient = {"attention_q", "attention_k", "attention_v", "attention_out",
                                           "attention_lse"};
  std::vector<std::string> sets = kVitShortRun;
  sets.push_back("model.attention=memory_efficient");
  EXPECT_EQ(attention_ops(run_training(tiny_config(vit_fixture_data(), temp_dir("vit_me"), sets), quiet())), efficient);
  sets = kVitShortRun;
  sets.push_back("saved_tensors.default={scheme: gact-CB2}");
  sets.push_back("memory.recompute=[\"encoder.layers.*.mlp\"]");
  EXPECT_EQ(attention_ops(run_training(tiny_config(vit_fixture_data(), temp_dir("vit_cb2"), sets), quiet())),
            efficient);
  // A config naming the algorithm wins over the preset's.
  sets.push_back("model.attention=standard");
  EXPECT_TRUE(attention_ops(run_training(tiny_config(vit_fixture_data(), temp_dir("vit_cb2_std"), sets), quiet()))
                  .count("attention_softmax"));
}

// GACT's measured refresh on a model with dropout: its gradient evaluations draw the step's masks,
// so with nearest rounding (no quantization noise to re-draw) every pass gives the baseline's
// gradient and every tensor's sensitivity is 0. Fresh masks in each pass made it the masks' variance.
TEST(VitTrainer, GactRefreshPassesDrawTheStepsDropoutMasks) {
  std::vector<std::string> sets = kVitShortRun;
  sets.push_back("model.dropout=0.3");
  sets.push_back("saved_tensors.default={scheme: gact, avg_bits: 4, rounding: nearest, tensors_per_refresh: 6}");
  const Config c = tiny_config(vit_fixture_data(), temp_dir("vit_gact_masks"), sets);
  Session s = make_session(c, synthetic_input_spec(c));
  const SyntheticBatch b = synthetic_batch(4, s.input.channels, s.input.height, s.input.width, s.input.classes, 7);
  train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, 0, {});
  const std::vector<GactStore*> gact = find_gact_stores(*s.policy);
  ASSERT_EQ(gact.size(), 1u);
  ASSERT_EQ(gact[0]->refreshes(), 1);
  EXPECT_FALSE(gact[0]->relative_variance());  // variance: auto under SGD
  ASSERT_GT(gact[0]->tensors().size(), 10u);
  int estimated = 0;  // the first 6 (tensors_per_refresh)
  for (const TensorSensitivity& t : gact[0]->tensors())
    if (t.estimated) {
      ++estimated;
      EXPECT_EQ(t.sensitivity, 0.0) << t.layer << " " << t.op;
    }
  EXPECT_EQ(estimated, 6);
  // The others, not measured yet, keep their first bits (the largest candidate within avg_bits),
  // and the estimated ones share what is left of the budget: an unmeasured sensitivity reads 0,
  // which gave them 1 bit or 8 by the greedy allocation's order.
  for (const TensorSensitivity& t : gact[0]->tensors()) {
    if (!t.estimated) {
      EXPECT_EQ(t.bits, 4) << t.layer << " " << t.op;
    }
  }
  EXPECT_LE(gact[0]->average_bits(), 4.0 + 1e-9);
  // And the step itself drew the masks a step without a refresh draws: its mask streams stand where
  // the FP32 session's stand after its step (one forward's draws each).
  sets.back() = "saved_tensors.default=fp32";
  const Config c32 = tiny_config(vit_fixture_data(), temp_dir("vit_gact_masks32"), sets);
  Session s32 = make_session(c32, synthetic_input_spec(c32));
  train_step(*s32.model, *s32.optimizer, *s32.policy, b.images, b.labels, 0, {});
  const auto streams = static_cast<const Module&>(*s.model).named_mask_streams();
  const auto streams32 = static_cast<const Module&>(*s32.model).named_mask_streams();
  ASSERT_EQ(streams.size(), streams32.size());
  ASSERT_FALSE(streams.empty());
  uint64_t draws = 0;  // attention dropout is 0: those streams never draw
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_EQ(streams[i].second.calls, streams32[i].second.calls) << streams[i].first;
    draws += streams[i].second.calls;
  }
  EXPECT_GT(draws, 0u);
}

// `variance: auto` follows the optimizer: relative under AdamW, which normalises each parameter's
// update; what the config writes wins.
TEST(VitTrainer, GactVarianceAutoIsRelativeUnderAdamW) {
  auto relative = [](const std::vector<std::string>& extra) {
    std::vector<std::string> sets = kVitShortRun;
    sets.insert(sets.end(), extra.begin(), extra.end());
    const Config c = tiny_config(vit_fixture_data(), temp_dir("vit_gact_variance"), sets);
    Session s = make_session(c, synthetic_input_spec(c));
    return find_gact_stores(*s.policy).at(0)->relative_variance();
  };
  EXPECT_TRUE(relative({"saved_tensors.default=gact-L1", "optimizer={name: adamw, lr: 0.001}"}));
  EXPECT_FALSE(relative({"saved_tensors.default=gact-L1"}));  // SGD
  EXPECT_FALSE(relative({"saved_tensors.default={scheme: gact-L1, variance: absolute}", "optimizer={name: adamw, lr: 0.001}"}));
}
