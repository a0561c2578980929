// The trainer with a text encoder (ModelKind::encodes_text), here a tiny one registered by the
// test (embedding, a linear layer, then a pooled classifier or a per-position byte head):
// data.dataset text_classes (classes of fortune files, accuracy in the metrics), train.task mlm
// on data.dataset text (BERT's masking, accuracy over the masked bytes, an exact resume), and
// train.init_from (pretrain, then fine-tune the shared parameters with another head). Bad inputs
// name the key or the file; the trainer's exit code for them is 2.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "data/masked_lm.h"
#include "data/tokens.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/gradient_fidelity.h"
#include "experiments/lib/init_from.h"
#include "experiments/lib/run.h"
#include "experiments/lib/safetensors.h"
#include "experiments/lib/session.h"
#include "experiments/lib/text_task.h"
#include "experiments/lib/tools.h"
#include "experiments/lib/trainer_main.h"
#include "layers/embedding.h"
#include "layers/linear.h"
#include "models/registry.h"
#include "tests/experiments/run_files.h"
#include "tests/experiments/tiny_config.h"
#include "tests/support/errors.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kDim = 16;
const char* const kArch = "tiny_text_encoder_test";

ModelSpec& last_spec() {  // what the session asked of the model last
  static ModelSpec s;
  return s;
}

// embed (256 -> D), body (D -> D) + GELU, then the head ModelSpec::text_head asks for: "classes":
// the mean over the positions, classifier (D -> classes), logits (N, classes); "tokens":
// mlm_head (D -> 256) at every position, logits (N, T, 256).
class TinyTextEncoder : public Module {
 public:
  explicit TinyTextEncoder(const ModelSpec& s) : classes_(s.text_head != "tokens") {
    embed_ = register_module("embed", std::make_shared<Embedding>(256, kDim, s.seed + 1));
    body_ = register_module("body", std::make_shared<Linear>(kDim, kDim, true, s.seed + 2));
    head_ = register_module(classes_ ? "classifier" : "mlm_head",
                            std::make_shared<Linear>(kDim, s.num_classes, true, s.seed + 3));
  }
  Tensor forward(const Tensor& tokens) override {  // (N, T) i64
    const Tensor h = ops::gelu((*body_)((*embed_)(tokens)));  // (N, T, D)
    if (!classes_) return (*head_)(h);                         // (N, T, 256)
    const int64_t n = h.dim(0), t = h.dim(1);
    const std::array<int64_t, 3> to_ndt{0, 2, 1};
    const Tensor pooled = ops::adaptive_avgpool2d(ops::reshape(ops::permute(h, to_ndt), Shape{n, kDim, t, 1}), 1, 1);
    return (*head_)(ops::flatten(pooled));  // (N, D, 1, 1) -> (N, classes)
  }

 private:
  bool classes_;
  std::shared_ptr<Embedding> embed_;
  std::shared_ptr<Linear> body_, head_;
};

void register_tiny_encoder() {
  static const bool done = [] {
    ModelKind k;
    k.make = [](const ModelSpec& s) {
      last_spec() = s;
      return std::make_shared<TinyTextEncoder>(s);
    };
    k.keys = {"classes"};
    k.takes_text = true;
    k.encodes_text = true;
    k.default_activation = "gelu";
    register_model(kArch, k);
    return true;
  }();
  (void)done;
}

// Three classes a bag of bytes tells apart: records of digits, of lower-case and of upper-case
// letters, 40 records each (36 train, 4 test).
fs::path three_class_folder(const std::string& name) {
  const fs::path d = temp_dir(name);
  std::mt19937 rng(7);
  for (const auto& [cls, first, count] : {std::tuple{"digits", '0', 10}, std::tuple{"lower", 'a', 26},
                                          std::tuple{"upper", 'A', 26}}) {
    std::string text;
    for (int r = 0; r < 40; ++r) {
      const int len = 8 + static_cast<int>(rng() % 16);
      for (int i = 0; i < len; ++i) text += static_cast<char>(first + static_cast<int>(rng() % count));
      text += "\n%\n";
    }
    write_text(d / cls, text);
  }
  return d;
}

const std::string kText = std::string(PACKRAT_SOURCE_DIR) + "/tests/data/text/gpl3_excerpt.txt";

Config classes_config(const fs::path& root, const fs::path& out, const std::vector<std::string>& sets = {}) {
  register_tiny_encoder();
  const std::string yaml = "seed: 4\n"
                           "data: {dataset: text_classes, root: \"" + root.string() + "\", seq_len: 16, batch_size: 12, "
                           "eval_batch_size: 32}\n"
                           "model: {arch: " + kArch + "}\n"
                           "optimizer: {name: adamw, lr: 0.02, weight_decay: 0}\n"
                           "train: {epochs: 3}\n"
                           "output: {dir: \"" + out.string() + "\"}\n";
  return parse_config(yaml, "classes.yaml", sets);
}

Config mlm_config(const fs::path& out, const std::vector<std::string>& sets = {}) {
  register_tiny_encoder();
  const std::string yaml = "seed: 5\n"
                           "data: {dataset: text, root: \"" + kText + "\", seq_len: 32, batch_size: 8, "
                           "eval_batch_size: 16}\n"
                           "model: {arch: " + kArch + "}\n"
                           "optimizer: {name: adamw, lr: 0.01, weight_decay: 0}\n"
                           "train: {epochs: 2, steps_per_epoch: 6}\n"
                           "output: {dir: \"" + out.string() + "\"}\n";
  return parse_config(yaml, "mlm.yaml", sets);
}

std::map<std::string, std::vector<float>> model_tensors(const std::string& checkpoint) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [n, t] : read_safetensors(checkpoint).tensors)
    if (n.rfind("model.", 0) == 0) out[n.substr(6)] = t.to_vector();
  return out;
}

}  // namespace

TEST(TextClassesTrainer, LearnsTheClassesWithAClassifierHead) {
  const fs::path root = three_class_folder("tc_data"), out = temp_dir("tc_run");
  const RunResult r = run_training(classes_config(root, out), quiet());
  EXPECT_EQ(last_spec().text_head, "classes");
  EXPECT_EQ(last_spec().num_classes, 3);
  ASSERT_EQ(r.epochs.size(), 3u);
  EXPECT_GT(r.epochs.back().test_acc, 0.9);  // 12 test records, 4 of each class
  EXPECT_LT(r.epochs.back().train_loss, r.epochs.front().train_loss);
  EXPECT_TRUE(std::isnan(r.epochs.back().test_bpb));  // accuracy, not bits per byte
  EXPECT_TRUE(contains(read_text(out / "metrics.csv"), "test_acc"));
  // The resolved config reads back; it has no train.task (a key of data.dataset text only).
  const std::string resolved = read_text(out / "config.yaml");
  EXPECT_FALSE(contains(resolved, "task:")) << resolved;
  EXPECT_TRUE(contains(resolved, "dataset: text_classes"));
  EXPECT_EQ(config_to_yaml(parse_config(resolved, "config.yaml")), resolved);
}

TEST(TextClassesTrainer, SyntheticInputsAreTokensAndClassLabels) {
  const fs::path root = three_class_folder("tc_synth");
  const Config c = classes_config(root, temp_dir("tc_synth_run"));
  const InputSpec in = synthetic_input_spec(c);  // the class files counted
  EXPECT_EQ(in.classes, 3);
  EXPECT_EQ(in.width, 16);
  const SyntheticBatch b = synthetic_inputs(c, in, 4);
  ASSERT_EQ(b.images.shape(), (Shape{4, 16}));
  ASSERT_EQ(b.labels.shape(), (Shape{4}));
  for (int64_t n = 0; n < 4; ++n) {
    EXPECT_EQ(b.images.data<int64_t>()[n * 16], data::kClsToken);
    EXPECT_LT(b.labels.data<int64_t>()[n], 3);
  }
  Session s = make_session(c, in);
  NoGradScope no_grad;
  EXPECT_EQ((*s.model)(b.images).shape(), (Shape{4, 3}));
  // model.classes stands for the folder, which then is not read.
  EXPECT_EQ(synthetic_input_spec(classes_config("/nonexistent", "/tmp/unused", {"model.classes=5"})).classes, 5);
}

// The synthetic-input modes (--memory-report-only, --benchmark) run both tasks: the loss's
// saved targets are the batch's labels, (N) classes or (N, T) masked-language-model targets.
TEST(TextClassesTrainer, MemoryReportAndBenchmarkRunOnSyntheticTokens) {
  const fs::path root = three_class_folder("tc_report");
  for (const Config& c : {classes_config(root, temp_dir("tc_report_run")), mlm_config(temp_dir("mlm_report_run"))}) {
    SCOPED_TRACE(c.data.dataset);
    const MemoryReport r = memory_report_only(c);
    EXPECT_EQ(r.saved_bytes, r.allocator_saved_bytes);
    bool targets = false;
    for (const SavedRecord& t : r.tensors)
      if (t.op == "cross_entropy" && t.need == Need::Index) {
        targets = true;
        EXPECT_EQ(t.numel, c.data.dataset == "text" ? 8 * 32 : 12) << "the batch's labels";
      }
    EXPECT_TRUE(targets);
    EXPECT_GT(benchmark(c, 2).img_per_s, 0.0);
  }
}

TEST(TextClassesTrainer, ConfigsThatCannotWorkAreRefusedNamingTheKey) {
  register_tiny_encoder();
  const fs::path root = three_class_folder("tc_refused");
  auto parse_error = [&](const std::string& arch, const std::string& dataset, const std::vector<std::string>& sets) {
    const std::string tokens = dataset == "text" || dataset == "text_classes" ? ", seq_len: 16" : "";
    const std::string yaml = "data: {dataset: " + dataset + ", root: \"" + root.string() + "\"" + tokens + "}\n"
                             "model: {arch: " + arch + "}\n";
    return message_of([&] { parse_config(yaml, "k.yaml", sets); });
  };
  // text_classes needs a text encoder: the GPTs and the image models are refused, the encoders listed.
  for (const char* arch : {"gpt_tiny", "resnet20"}) {
    const std::string m = parse_error(arch, "text_classes", {});
    EXPECT_TRUE(contains(m, "k.yaml: data.dataset (line 1): is text_classes (token sequences to classify), but "
                            "model.arch " + std::string(arch) + " is no text encoder")) << m;
    EXPECT_TRUE(contains(m, kArch)) << m;
  }
  // An encoder on images.
  std::string m = parse_error(kArch, "cifar10", {});
  EXPECT_TRUE(contains(m, "model.arch (line 2): " + std::string(kArch) + " takes text (data.dataset: text or "
                          "text_classes), but data.dataset is cifar10")) << m;
  // train.task: mlm needs an encoder, next_token a causal model.
  m = parse_error("gpt_tiny", "text", {"train.task=mlm"});
  EXPECT_TRUE(contains(m, "--set train.task: train.task: is mlm")) << m;
  EXPECT_TRUE(contains(m, "gpt_tiny is causal")) << m;
  m = parse_error(kArch, "text", {"train.task=next_token"});
  EXPECT_TRUE(contains(m, "is next_token, but model.arch " + std::string(kArch) + " is a bidirectional text encoder"))
      << m;
  m = parse_error(kArch, "text", {"train.task=words"});
  EXPECT_TRUE(contains(m, "train.task")) << m;
  // The defaults: mlm for an encoder, next_token for a GPT.
  EXPECT_EQ(parse_config("data: {dataset: text, root: x, seq_len: 4}\nmodel: {arch: " + std::string(kArch) + "}\n",
                         "k.yaml").train.task, "mlm");
  EXPECT_EQ(parse_config("data: {dataset: text, root: x, seq_len: 4}\nmodel: {arch: gpt_tiny}\n", "k.yaml").train.task,
            "next_token");
  // Transforms are not for tokens.
  m = parse_error(kArch, "text_classes", {"data.train_transforms=[hflip]"});
  EXPECT_TRUE(contains(m, "data.train_transforms: only applies to data.dataset cifar10")) << m;
  EXPECT_TRUE(contains(m, "not text_classes")) << m;
}

TEST(TextClassesTrainer, BadClassFoldersNameTheFileOrKeyAndTheTrainerExitsWithTwo) {
  register_tiny_encoder();
  const fs::path root = three_class_folder("tc_bad");
  // A whitespace-only record: the file and its line.
  write_text(root / "lower", "abc\n%\nxyz\n%\n   \n%\nqrs\n");
  std::string m = message_of([&] { run_training(classes_config(root, temp_dir("tc_bad_run")), quiet()); });
  EXPECT_TRUE(contains(m, (root / "lower").string() + " line 5: record 3 is empty")) << m;
  // The trainer's command line: the same message on stderr and exit code 2.
  const fs::path yaml = temp_dir("tc_bad_yaml") / "c.yaml";
  write_text(yaml, config_to_yaml(classes_config(root, temp_dir("tc_bad_run2"))));
  ::setenv("OMP_WAIT_POLICY", "passive", 0);  // run_trainer re-executes the program without it
  std::vector<std::string> args{"trainer", "--config", yaml.string()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStderr();
  const int code = run_trainer(static_cast<int>(argv.size()), argv.data());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 2);
  EXPECT_TRUE(contains(err, "trainer: error: text_classes: " + (root / "lower").string() + " line 5")) << err;
  // One class left: data.root named.
  for (const char* f : {"lower", "upper"}) fs::remove(root / f);
  m = message_of([&] { run_training(classes_config(root, temp_dir("tc_bad_run3")), quiet()); });
  EXPECT_TRUE(contains(m, "text_classes: data.root '" + root.string() + "' holds 1 class file(s)")) << m;
}

TEST(TextClassesTrainer, TheRunDirectoryMayNotBeTheDataFolder) {
  const fs::path root = three_class_folder("tc_outdir");
  const std::string m = message_of([&] { run_training(classes_config(root, root / "run"), quiet()); });
  EXPECT_TRUE(contains(m, "is inside data.root")) << m;
}

TEST(MaskedLmTrainer, PredictsTheMaskedBytesAndAveragesOverThemOnly) {
  const fs::path out = temp_dir("mlm_run");
  const Config c = mlm_config(out);
  EXPECT_EQ(c.train.task, "mlm");  // the encoder's default
  const RunResult r = run_training(c, quiet());
  EXPECT_EQ(last_spec().text_head, "tokens");
  EXPECT_EQ(last_spec().num_classes, 256);
  ASSERT_EQ(r.epochs.size(), 2u);
  for (const EpochMetrics& m : r.epochs) {
    EXPECT_NEAR(m.train_bpb, m.train_loss / std::log(2.0), 1e-9);  // bits per masked byte
    EXPECT_GT(m.test_acc, 0.0);
  }
  EXPECT_LT(r.epochs.back().train_loss, r.epochs.front().train_loss);
  EXPECT_LT(r.epochs.back().train_loss, std::log(256.0));  // better than uniform over the bytes

  // One step by hand: the loss is the cross-entropy over the masked positions only, and the count
  // (accuracy's denominator) is their number, 5 of the 31 bytes of each sample.
  const InputSpec in = synthetic_input_spec(c);
  Session s = make_session(c, in);
  const SyntheticBatch b = synthetic_inputs(c, in, 4);
  int64_t masked = 0;
  for (int64_t i = 0; i < b.labels.numel(); ++i) masked += b.labels.data<int64_t>()[i] != data::kIgnoreTarget;
  EXPECT_EQ(masked, 4 * data::masked_positions(32));
  NoGradScope no_grad;
  const Tensor logits = (*s.model)(b.images);
  ASSERT_EQ(logits.shape(), (Shape{4, 32, 256}));
  const Hits hits = count_correct(logits, b.labels);
  EXPECT_EQ(hits.count, masked);
  // The same loss from the masked rows alone.
  const std::vector<float> lv = logits.to_vector();
  double want = 0;
  for (int64_t i = 0; i < 4 * 32; ++i) {
    const int64_t t = b.labels.data<int64_t>()[i];
    if (t == data::kIgnoreTarget) continue;
    double mx = -1e30, sum = 0;
    for (int64_t v = 0; v < 256; ++v) mx = std::max(mx, static_cast<double>(lv[i * 256 + v]));
    for (int64_t v = 0; v < 256; ++v) sum += std::exp(lv[i * 256 + v] - mx);
    want += (std::log(sum) + mx - lv[i * 256 + t]) / static_cast<double>(masked);
  }
  EXPECT_NEAR(task_loss(logits, b.labels, 0.0f).item(), want, 1e-4 * want);
}

TEST(MaskedLmTrainer, AResumedRunMasksAndEndsExactlyAsTheUninterruptedOne) {
  const fs::path whole = temp_dir("mlm_whole"), parts = temp_dir("mlm_parts");
  run_training(mlm_config(whole), quiet());
  RunOptions first = quiet();
  first.stop_after_epoch = 1;
  run_training(mlm_config(parts), first);
  RunOptions resume = quiet();
  resume.resume = true;
  const RunResult r = run_training(mlm_config(parts), resume);
  EXPECT_EQ(r.start_epoch, 1);
  EXPECT_EQ(model_tensors(checkpoint_path(whole.string(), 2)), model_tensors(checkpoint_path(parts.string(), 2)));
}

// --gradient-fidelity on masked-language-model batches: the loss over the masked bytes, whose
// gradient reaches every parameter (an FP32 reference measured against 2-bit ActNN).
TEST(MaskedLmTrainer, GradientFidelityMeasuresTheMaskedLoss) {
  const FidelityReport r =
      gradient_fidelity_mode(mlm_config(temp_dir("mlm_fidelity"), {"saved_tensors.default={scheme: actnn, bits: 2}"}), 2);
  ASSERT_EQ(r.tensors.size(), 5u);
  EXPECT_GT(r.total.cosine, 0.5);
  EXPECT_LT(r.total.cosine, 1.0);
}

TEST(InitFrom, AFineTuneStartsFromThePretrainedSharedParametersBitForBit) {
  // Pretrain with the masked-language-model head, then fine-tune on classes with another head.
  const fs::path pre = temp_dir("init_pre");
  run_training(mlm_config(pre, {"train.epochs=1", "train.steps_per_epoch=3"}), quiet());
  const std::string ckpt = checkpoint_path(pre.string(), 1);
  const auto pretrained = model_tensors(ckpt);
  ASSERT_TRUE(pretrained.count("mlm_head.weight"));

  const fs::path root = three_class_folder("init_data");
  const Config c = classes_config(root, temp_dir("init_fresh"));
  Session fresh = make_session(c, synthetic_input_spec(c));
  std::map<std::string, std::vector<float>> init;
  for (auto& [n, t] : fresh.model->named_parameters()) init[n] = t.to_vector();
  const InitFromResult r = init_from_checkpoint(ckpt, *fresh.model, "c.yaml: train.init_from");
  EXPECT_EQ(r.params, 5);
  EXPECT_EQ(r.loaded_params, 3);
  EXPECT_EQ(r.skipped, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  EXPECT_EQ(r.unused, (std::vector<std::string>{"mlm_head.bias", "mlm_head.weight"}));
  EXPECT_EQ(r.summary(), "init_from " + ckpt + ": loaded 3 of 5 parameters (skipped: classifier.weight, "
                         "classifier.bias); not in the model: mlm_head.bias, mlm_head.weight");
  for (auto& [n, t] : fresh.model->named_parameters()) {
    if (n.rfind("classifier.", 0) == 0) EXPECT_EQ(t.to_vector(), init.at(n)) << n;  // its fresh initialisation
    else EXPECT_EQ(t.to_vector(), pretrained.at(n)) << n;                           // the checkpoint's, bit for bit
  }
  // A run directory stands for its latest checkpoint.
  EXPECT_EQ(init_from_checkpoint(pre.string(), *fresh.model, "k").path, ckpt);

  // Through the trainer: with a learning rate of 0 nothing moves, so the fine-tune's checkpoint
  // holds the pretrained parameters and the fresh head; the log says what was loaded.
  const fs::path tune = temp_dir("init_tune");
  RunOptions o = quiet();
  o.log_file = true;
  run_training(classes_config(root, tune, {"train.init_from=" + ckpt, "train.epochs=1", "optimizer.lr=0"}), o);
  const auto tuned = model_tensors(checkpoint_path(tune.string(), 1));
  for (const auto& [n, v] : tuned) EXPECT_EQ(v, n.rfind("classifier.", 0) == 0 ? init.at(n) : pretrained.at(n)) << n;
  EXPECT_TRUE(contains(read_text(tune / "train.log"), "init_from " + ckpt + ": loaded 3 of 5 parameters (skipped: "
                                                       "classifier.weight, classifier.bias)"));
  // Resuming the fine-tune continues from its own checkpoint: init_from is not applied again.
  RunOptions resume = o;
  resume.resume = true;
  run_training(classes_config(root, tune, {"train.init_from=" + ckpt, "train.epochs=2", "optimizer.lr=0"}), resume);
  EXPECT_TRUE(contains(read_text(tune / "train.log"), "is not applied again"));
}

TEST(InitFrom, MismatchesAndBadFilesAreErrorsNamingTheKey) {
  const fs::path root = three_class_folder("init_bad_data");
  const fs::path three = temp_dir("init_bad_three");
  run_training(classes_config(root, three, {"train.epochs=1"}), quiet());
  const std::string ckpt = checkpoint_path(three.string(), 1);
  // Four classes: classifier.weight is (4, 16) here, (3, 16) in the checkpoint.
  write_text(root / "zzz", "one\n%\ntwo\n");
  auto refusal = [&](const std::string& from) {
    const fs::path out = temp_dir("init_bad_run");
    const std::string m = message_of([&] { run_training(classes_config(root, out, {"train.init_from=" + from}), quiet()); });
    EXPECT_FALSE(fs::exists(out / "metrics.csv")) << "refused before the run directory is written";
    return m;
  };
  std::string m = refusal(ckpt);
  EXPECT_TRUE(contains(m, "classes.yaml: train.init_from '" + ckpt + "': 'classifier.weight' is (3, 16) f32 in the "
                          "checkpoint but (4, 16) f32 in the model")) << m;
  m = refusal((three / "nothing.safetensors").string());
  EXPECT_TRUE(contains(m, "classes.yaml: train.init_from '" + (three / "nothing.safetensors").string() + "': no such "
                          "file")) << m;
  write_text(three / "garbage.safetensors", "not a safetensors file at all");
  m = refusal((three / "garbage.safetensors").string());
  EXPECT_TRUE(contains(m, "classes.yaml: train.init_from: ")) << m;
  EXPECT_TRUE(contains(m, "garbage.safetensors")) << m;
  // A checkpoint of another model: nothing matches.
  Tensor w = Tensor::zeros({2, 2});
  write_safetensors((three / "other.safetensors").string(), {{"model.conv1.weight", w}});
  m = refusal((three / "other.safetensors").string());
  EXPECT_TRUE(contains(m, "none of the model's 5 parameters is in the checkpoint")) << m;
  fs::create_directories(three / "empty_run");
  m = refusal((three / "empty_run").string());
  EXPECT_TRUE(contains(m, "a directory without checkpoints")) << m;
}
