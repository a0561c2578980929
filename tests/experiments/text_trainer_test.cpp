// The trainer on data.dataset: text with a GPT: bits per byte in the metrics, the memory report
// of every saved tensor under every scheme, synthetic token inputs, errors that name the key.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <regex>

#include "experiments/lib/memory_report.h"
#include "experiments/lib/run.h"
#include "experiments/lib/session.h"
#include "experiments/lib/text_task.h"
#include "experiments/lib/tools.h"
#include "experiments/lib/train_loop.h"
#include "tests/experiments/tiny_config.h"
#include "tests/experiments/run_files.h"
#include "tests/support/errors.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

const std::string kText = std::string(PACKRAT_SOURCE_DIR) + "/tests/data/text/gpl3_excerpt.txt";

Config text_config(const fs::path& out, const std::vector<std::string>& sets = {}) {
  const std::string yaml = "seed: 2\n"
                           "data: {dataset: text, root: \"" + kText + "\", seq_len: 32, batch_size: 8, eval_batch_size: 16}\n"
                           "model: {arch: gpt_tiny}\n"
                           "saved_tensors: {default: fp32}\n"
                           "optimizer: {name: adamw, lr: 0.003, weight_decay: 0.1}\n"
                           "train: {epochs: 2, steps_per_epoch: 8, clip_grad_norm: 1.0}\n"
                           "output: {dir: \"" + out.string() + "\", checkpoint_interval: 0}\n";
  return parse_config(yaml, "text.yaml", sets);
}

}  // namespace

TEST(TextTrainer, LearnsAndReportsBitsPerByte) {
  const fs::path out = temp_dir("text_run");
  RunOptions o;
  o.tty = 0;
  o.print_report = false;
  const RunResult r = run_training(text_config(out), o);
  ASSERT_EQ(r.epochs.size(), 2u);
  for (const EpochMetrics& m : r.epochs) {
    EXPECT_NEAR(m.train_bpb, m.train_loss / std::numbers::ln2, 1e-9);
    EXPECT_NEAR(m.test_bpb, m.test_loss / std::numbers::ln2, 1e-9);
  }
  // From 8 bits (uniform over 256 bytes) it learns at least the byte frequencies of English text.
  EXPECT_LT(r.epochs[1].test_bpb, 6.0);
  EXPECT_LT(r.epochs[1].train_bpb, r.epochs[0].train_bpb);
  const std::string csv = read_text(out / "metrics.csv");
  EXPECT_NE(csv.find("train_bpb,test_bpb"), std::string::npos);
  EXPECT_NE(read_text(out / "metrics.jsonl").find("\"test_bpb\""), std::string::npos);
  // Every saved tensor of the model is named by its layer (the loss is outside the model).
  ASSERT_FALSE(r.report.tensors.empty());
  for (const SavedRecord& t : r.report.tensors)
    if (t.op != "cross_entropy") {
      EXPECT_FALSE(t.layer.empty()) << t.op;
    }
}

TEST(TextTrainer, EverySavedTensorIsNamedByBlockAndCompressedByEveryScheme) {
  const fs::path out = temp_dir("text_schemes");
  for (const std::string scheme : {"{scheme: actnn, bits: 4}", "{scheme: gact, avg_bits: 2}", "{scheme: mixed}",
                                    "{scheme: deterministic, bits: 4}"}) {
    SCOPED_TRACE(scheme);
    const Config c = text_config(out, {"data.batch_size=4", "saved_tensors.default=" + scheme,
                                       "saved_tensors.rules=[{ops: [gelu], scheme: fewbit, bits: 3}]"});
    const MemoryReport r = memory_report_only(c);
    ASSERT_FALSE(r.tensors.empty());
    EXPECT_EQ(r.saved_bytes, r.allocator_saved_bytes);
    std::set<std::string> layers;
    for (const SavedRecord& t : r.tensors) {
      layers.insert(t.layer);
      if (t.op == "gelu") {
        EXPECT_EQ(t.scheme, "fewbit") << t.layer;
      }
      // Every activation-sized tensor kept for its value (linear and layernorm inputs, Q, K, V,
      // the softmax output: at least N x T x D = 4 x 32 x 64 elements) is compressed; what stays
      // exact is small (layernorm row statistics, token ids, masks) or FP32 by design (the loss's
      // probabilities).
      if (t.need == Need::Value && t.op != "cross_entropy" && t.numel >= 4 * 32 * 64) {
        EXPECT_LT(t.bytes, t.fp32_bytes / 4) << t.op << " " << t.layer << " " << t.scheme;
      }
    }
    for (const char* want : {"transformer.h.0.attn", "transformer.h.1.attn", "transformer.h.0.mlp.c_fc",
                             "transformer.h.1.mlp.act", "transformer.h.0.ln_1", "transformer.ln_f", "lm_head"})
      EXPECT_TRUE(layers.count(want)) << "no saved tensor in " << want;
  }
}

TEST(TextTrainer, TiedWeightIsCountedOnce) {
  // The allocator's Parameter bytes of a fresh GPT are its parameter count x 4: the head holds
  // no copy of the token embedding, and named_parameters lists the tied weight once.
  const Config c = text_config(temp_dir("text_tied"));
  const int64_t before = Allocator::cpu().current(MemTag::Parameter);
  Session s = make_session(c, synthetic_input_spec(c));
  EXPECT_EQ(Allocator::cpu().current(MemTag::Parameter) - before, 4 * s.model->num_parameters());
  int64_t wte = 0;
  for (auto& [name, p] : s.model->named_parameters()) {
    wte += name == "transformer.wte.weight";
    EXPECT_EQ(name.find("lm_head"), std::string::npos) << name;
  }
  EXPECT_EQ(wte, 1);
}

TEST(TextTrainer, BadInputsNameTheKey) {
  const fs::path out = temp_dir("text_bad");
  RunOptions o;
  o.tty = 0;
  o.print_report = false;
  auto run = [&](const std::vector<std::string>& sets) {
    return message_of([&] { run_training(text_config(out, sets), o); });
  };
  EXPECT_NE(run({"data.seq_len=0", "output.dir=" + (out / "a").string()}).find("data.seq_len is 0"), std::string::npos);
  EXPECT_NE(run({"data.seq_len=1000", "output.dir=" + (out / "b").string()}).find("data.seq_len is 1000, longer than"),
            std::string::npos);
  const std::string m = run({"data.seq_len=129", "data.root=/usr/share/common-licenses/GPL-3",
                             "output.dir=" + (out / "c").string()});
  EXPECT_NE(m.find("set data.seq_len to at most 128"), std::string::npos) << m;
  EXPECT_NE(run({"data.root=/nonexistent/text", "output.dir=" + (out / "d").string()}).find("data.root"),
            std::string::npos);
  EXPECT_NE(run({"model.arch=gpt_enormous", "output.dir=" + (out / "e").string()}).find("gpt_tiny"), std::string::npos);
}
