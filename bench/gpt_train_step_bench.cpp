// One full training step (forward, backward, AdamW update) of the GPT presets (models/gpt.h) on
// random bytes, T = 128 tokens per sequence, under FP32 storage and the compressed storage of
// configs/gpt_fortunes.yaml (3-bit few-bit GELU, 4-bit per-group for the rest). Reports tokens/s
// as the counters tok_per_s (wall clock) and cpu_tok_per_s (process CPU time); bench/torch_gpt_step.py is its PyTorch twin and
// bench/compare_torch.py --name TrainStep/gpt_small/32 runs both side by side.
#include <benchmark/benchmark.h>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "bench/step_clock.h"
#include "core/philox.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "quant/policy/rule_policy.h"

namespace packrat {
namespace {

constexpr int64_t kSeqLen = 128, kVocab = 256;

StorePolicySpec gpt_scheme(const std::string& name) {
  StorePolicySpec s;
  if (name == "fewbit3_actnn4") {
    s.default_scheme = {"actnn", {{"bits", "4"}}, "bench"};
    s.rules.push_back({{"gelu"}, {}, {"fewbit", {{"bits", "3"}}, "bench"}});
  }
  return s;
}

// Names stay exactly "TrainStep/<model>[_<scheme>]/<batch>".
void GptTrainStep(benchmark::State& state, const std::string& arch, const std::string& scheme) {
  const int64_t batch = state.range(0);
  auto model = make_model({arch, "", "gelu", 1, kVocab, 0});
  AdamW opt(model->named_parameters(), AdamWOptions{1e-3, 0.9, 0.99, 1e-8, 0.1});
  PhiloxStream rng(1, 1);
  Tensor x = Tensor::empty({batch, kSeqLen}, DType::i64);  // (N, T) tokens
  Tensor y = Tensor::empty({batch * kSeqLen}, DType::i64);  // (N*T) next tokens
  for (int64_t i = 0; i < batch * kSeqLen; ++i) {
    x.data<int64_t>()[i] = static_cast<int64_t>(rng.below(kVocab));
    y.data<int64_t>()[i] = static_cast<int64_t>(rng.below(kVocab));
  }
  RulePolicy policy(gpt_scheme(scheme));
  PolicyScope scope(policy);
  int64_t step = 0;
  const bench::StepClock clock;
  for (auto _ : state) {
    policy.begin_step(step++);
    opt.zero_grad();
    Tensor logits = (*model)(x);  // (N, T, V)
    Tensor loss = ops::cross_entropy(ops::reshape(logits, Shape{batch * kSeqLen, kVocab}), y);
    backward(loss);
    opt.step();
  }
  const double wall = clock.wall_seconds(), cpu = clock.cpu_seconds();
  const double tokens = static_cast<double>(state.iterations() * batch * kSeqLen);
  state.SetItemsProcessed(state.iterations() * batch * kSeqLen);
  state.counters["tok_per_s"] = tokens / wall;
  state.counters["cpu_tok_per_s"] = tokens / cpu;
}

BENCHMARK_CAPTURE(GptTrainStep, gpt_small, std::string("gpt_small"), std::string("fp32"))
    ->Name("TrainStep/gpt_small")->Arg(32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(GptTrainStep, gpt_small_fewbit3_actnn4, std::string("gpt_small"), std::string("fewbit3_actnn4"))
    ->Name("TrainStep/gpt_small_fewbit3_actnn4")->Arg(32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(GptTrainStep, gpt_tiny, std::string("gpt_tiny"), std::string("fp32"))
    ->Name("TrainStep/gpt_tiny")->Arg(32)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace packrat
