// The config's keys (experiments/lib/config_key.h): one descriptor each, in the order they are
// read, listed as known keys, written (optimizer and schedule keys: in their optimizer's or
// schedule's order) and shown in the README.
#include <climits>

#include "autograd/pointwise.h"
#include "core/device.h"
#include "data/transforms.h"
#include "experiments/lib/cli.h"
#include "experiments/lib/config_key.h"
#include "experiments/lib/config_section.h"
#include "models/registry.h"
#include "optim/lr_schedule.h"
#include "optim/registry.h"

namespace packrat {

namespace {

// The Config field a key fills: top(&Config::seed), in(&Config::data, &DataConfig::root).
template <class T>
std::function<FieldRef(Config&)> top(T Config::*m) {
  return [m](Config& c) -> FieldRef { return &(c.*m); };
}
template <class S, class T>
std::function<FieldRef(Config&)> in(S Config::*s, T S::*m) {
  return [s, m](Config& c) -> FieldRef { return &(c.*s.*m); };
}

ConfigKey key(std::string section, std::string name, KeyType type, std::function<FieldRef(Config&)> field,
              std::string def, std::string help) {
  ConfigKey k;
  k.section = std::move(section);
  k.name = std::move(name);
  k.type = type;
  k.field = std::move(field);
  k.default_text = std::move(def);
  k.help = std::move(help);
  return k;
}
ConfigKey integer(std::string section, std::string name, std::function<FieldRef(Config&)> field, std::string def,
                  int64_t lo, int64_t hi, std::string help) {
  ConfigKey k = key(std::move(section), std::move(name), KeyType::Integer, std::move(field), std::move(def), std::move(help));
  k.int_min = lo;
  k.int_max = hi;
  return k;
}
ConfigKey number(std::string section, std::string name, std::function<FieldRef(Config&)> field, std::string def,
                 double lo, double hi, std::string help) {
  ConfigKey k = key(std::move(section), std::move(name), KeyType::Number, std::move(field), std::move(def), std::move(help));
  k.min = lo;
  k.max = hi;
  return k;
}
ConfigKey boolean(std::string section, std::string name, std::function<FieldRef(Config&)> field, std::string def,
                  std::string help) {
  return key(std::move(section), std::move(name), KeyType::Boolean, std::move(field), std::move(def), std::move(help));
}
ConfigKey text(std::string section, std::string name, std::function<FieldRef(Config&)> field, std::string def,
               std::string help) {
  return key(std::move(section), std::move(name), KeyType::Text, std::move(field), std::move(def), std::move(help));
}
ConfigKey required(ConfigKey k) {
  k.required = true;
  return k;
}
ConfigKey unset_by_default(ConfigKey k) {
  k.unset_by_default = true;
  return k;
}

// A key's own error, at the key: "file: data.channels (line 9): must be 1 or 3".
[[noreturn]] void refuse(config::Section& s, const char* key, const std::string& msg) {
  s.error_at(s.key_path(key), s.node()[key].Mark(), msg);
}

void check_pipeline(const std::vector<std::string>& items, config::Section& s, const char* key) {
  try {
    data::parse_pipeline(items);
  } catch (const Error& e) {
    refuse(s, key, e.what());
  }
}

// Tokens take no transforms; config_parse.cpp refuses them for text after the model's checks.
bool takes_no_transforms(const Config& c) { return c.data.dataset == "text" || c.data.dataset == "text_classes"; }

std::vector<ConfigKey> make_table() {
  using C = Config;
  using D = DataConfig;
  using M = ModelSpec;
  using O = OptimizerConfig;
  using S = ScheduleConfig;
  using T = TrainConfig;
  using Out = OutputConfig;
  using Dist = DistributedConfig;
  using Mem = MemoryConfig;
  const int64_t kMax = INT64_MAX;
  return {
      integer("", "seed", top(&C::seed), "0", 0, kMax,
              "seeds everything random: init, shuffle, augmentation, dropout, stochastic rounding"),
      integer("", "threads", top(&C::threads), "0", 0, 1024, "OpenMP threads (0: OpenMP's default)"),
      text("", "device", top(&C::device), "cpu",
           "`cpu`, `cuda` (= `cuda:0`) or `cuda:N`. A device that cannot train stops the trainer before anything is "
           "built, with the reason (exit 2): built without CUDA, no GPU visible, no such GPU; see \"Training on a GPU\"")
          .then([](Config& c, config::Section& s) {
            try {
              c.device = Device::parse(c.device).str();  // "cuda" -> "cuda:0"
            } catch (const Error&) {
              refuse(s, "device", fmt::format("is '{}', must be cpu, cuda or cuda:N", c.device));
            }
          }),
      text("", "conv_algorithm", top(&C::conv_algorithm), "auto",
           "`auto`: oneDNN may use Winograd (faster, more Workspace memory); `direct`: least memory; "
           "`deterministic`: on a GPU, only cuDNN algorithms that give the same bits run after run (on the CPU, `auto`)")
          .one_of({"auto", "direct", "deterministic"}),
      text("", "precision", top(&C::precision), "",
           "`fp32`, `tf32` (GPU: TF32 tensor cores for f32 convolutions and matmuls), `bf16` or `fp16` (autocast: "
           "convolutions, linear layers, matmuls and attention compute in 16 bits, activations flow and are saved in "
           "them, parameters, gradients, statistics, losses and the optimizer stay f32; `fp16` adds loss scaling). "
           "\"\": `fp32` on the CPU; on a GPU PyTorch's default, TF32 convolutions and f32 matmuls. See \"Mixed precision\"")
          .one_of({"", "fp32", "tf32", "bf16", "fp16"}),

      required(text("data", "dataset", in(&C::data, &D::dataset), "",
                    "`fashion_mnist`, `mnist`, `cifar10`, `cifar100`, `image_folder`, `text` (bytes of a file or "
                    "folder, see \"Text\"), `text_classes` (a folder of fortune files, one class each; default root "
                    "`/usr/share/games/fortunes`; see \"Text classification\")")),
      text("data", "root", in(&C::data, &D::root), "", "dataset directory (\"\": the dataset's default; see "
                                                       "`data/README.md`)").quoted(),
      integer("data", "batch_size", in(&C::data, &D::batch_size), "128", 1, 1 << 20, "training batch"),
      integer("data", "eval_batch_size", in(&C::data, &D::eval_batch_size), "256", 1, 1 << 20, "evaluation batch"),
      key("data", "train_transforms", KeyType::TextList, in(&C::data, &D::train_transforms), "[]",
          "e.g. `[\"random_crop(32, 4)\", \"hflip\", \"resize(40)\", \"normalize(cifar10)\"]`; not for `text`, "
          "`text_classes`")
          .unwritten_if(takes_no_transforms)
          .then([](Config& c, config::Section& s) { check_pipeline(c.data.train_transforms, s, "train_transforms"); }),
      key("data", "test_transforms", KeyType::TextList, in(&C::data, &D::test_transforms), "[]",
          "as train_transforms, for evaluation")
          .unwritten_if(takes_no_transforms)
          .then([](Config& c, config::Section& s) { check_pipeline(c.data.test_transforms, s, "test_transforms"); }),
      integer("data", "limit_train", in(&C::data, &D::limit_train), "0", 0, kMax, "use only the first N training images (0: all)"),
      integer("data", "limit_test", in(&C::data, &D::limit_test), "0", 0, kMax, "use only the first N test images (0: all)"),
      integer("data", "workers", in(&C::data, &D::workers), "1", 1, 64, "loader threads preparing a batch"),
      integer("data", "prefetch", in(&C::data, &D::prefetch), "2", 1, 64, "batches prepared ahead"),
      boolean("data", "download", in(&C::data, &D::download), "false",
              "fetch a missing CIFAR archive over HTTPS, check its MD5, unpack it")
          .for_datasets({"cifar10", "cifar100"}),
      text("data", "label", in(&C::data, &D::label), "fine", "CIFAR-100's fine or coarse labels")
          .one_of({"fine", "coarse"})
          .for_datasets({"cifar100"}),
      integer("data", "height", in(&C::data, &D::height), "0", 0, 1 << 16, "resize on load (0: keep)")
          .for_datasets({"image_folder"}),
      integer("data", "width", in(&C::data, &D::width), "0", 0, 1 << 16, "resize on load (0: keep)")
          .for_datasets({"image_folder"}),
      integer("data", "channels", in(&C::data, &D::channels), "3", 1, 3, "3 (RGB) or 1 (grey)")
          .for_datasets({"image_folder"})
          .then([](Config& c, config::Section& s) {
            if (c.data.channels == 2) refuse(s, "channels", "must be 1 or 3");
          }),
      // 0 is refused when the text is opened.
      integer("data", "seq_len", in(&C::data, &D::seq_len), "0", 0, 1 << 20,
              "tokens (bytes) per sample (required); text_classes: the class token and the record's bytes, truncated "
              "or padded to it")
          .for_datasets({"text", "text_classes"}),

      required(text("model", "arch", in(&C::model, &M::arch), "",
                    "`resnet18`, `resnet34`, `resnet50`, `resnet20`, `resnet32`, `resnet44`, `resnet56`, `resnet110`; "
                    "EfficientNets `efficientnet_b0`, `efficientnet_v2_s`, `efficientnet_b0_small`, "
                    "`efficientnet_v2_small` (see \"EfficientNet\"); Vision Transformers `vit_b_16` (torchvision's: "
                    "224, patch 16, 12 x 768, 12 heads), `vit_tiny_cifar` (patch 4, 6 x 192, 3 heads, MLP 384), "
                    "`vit_tiny_fmnist` (patch 4, 4 x 64, 4 heads, MLP 128); for text `gpt_tiny`, `gpt_small`, "
                    "`gpt_medium` (see \"Text\") and the BERT encoders `bert_tiny` (2 x 128, 2 heads), `bert_small` "
                    "(4 x 512, 8 heads), `bert_base` (12 x 768, 12 heads), `bert_large` (24 x 1024, 16 heads); "
                    "`sequential`: the layers of model.layers (see `docs/models.md`). Every other model.* "
                    "key is refused for an architecture that does not read it")),
      text("model", "stem", in(&C::model, &M::stem), "",
           "`imagenet` (7x7/2 conv + max-pool) or `cifar` (3x3/1 conv); \"\": the architecture's own")
          .one_of({"", "cifar", "imagenet"})
          .quoted(),
      [] {
        ConfigKey k = text("model", "activation", in(&C::model, &M::activation), "",
                           "any built-in pointwise activation: " + pointwise_names("`"))
                          .quoted()
                          .then([](Config& c, config::Section& s) {
                            if (!is_pointwise_name(c.model.activation))
                              s.error_at(s.key_path("activation"), s.raw("activation").Mark(),
                                         fmt::format("unknown activation '{}' ({})", c.model.activation,
                                                     pointwise_names()));
                          });
        k.default_from = [](const Config& c) { return default_activation(c.model.arch); };
        k.default_doc = "the architecture's own (ResNet `relu`, EfficientNet `silu`, ViT and GPT `gelu`)";
        return k;
      }(),
      integer("model", "classes", in(&C::model, &M::num_classes), "0", 0, 1 << 20,
              "0: the dataset's; fewer than the dataset's classes is an error"),
      integer("model", "in_channels", in(&C::model, &M::in_channels), "0", 0, 4096,
              "0: the dataset's; other channels than the data's is an error"),
      integer("model", "image_size", in(&C::model, &M::image_size), "0", 0, 1 << 16,
              "ViTs, `sequential`: 0 = the input's side (square images)"),
      integer("model", "patch_size", in(&C::model, &M::patch_size), "0", 0, 1 << 16,
              "ViTs: 0 = the preset's patch; one that does not divide the side is an error"),
      number("model", "width_mult", in(&C::model, &M::width_mult), "1", 1.0 / 64, 8.0,
             "EfficientNet: channels `_make_divisible(c * w, 8)` per stage, on top of the preset's own; "
             "BERT: attention heads `h * w` (a whole number; 64 wide each)"),
      number("model", "depth_mult", in(&C::model, &M::depth_mult), "1", 1.0 / 64, 8.0,
             "EfficientNet: blocks `ceil(n * d)` per stage, on top of the preset's own; BERT: layers `ceil(n * d)`"),
      unset_by_default(number("model", "dropout", in(&C::model, &M::dropout), "-1", 0.0, 0.99,
                              "unset (-1): the preset's own (ViT and GPT 0, BERT 0.1, EfficientNet 0.2). ViT: after "
                              "the embeddings and in the MLPs; GPT: embeddings, attention probabilities, residual "
                              "branches; BERT: embeddings, residual branches, feed-forward, pooled state; "
                              "EfficientNet: before the classifier")),
      unset_by_default(number("model", "attention_dropout", in(&C::model, &M::attention_dropout), "-1", 0.0, 0.99,
                              "unset (-1): the preset's own (ViT 0, BERT 0.1). ViT's and BERT's attention "
                              "probabilities")),
      text("model", "attention", in(&C::model, &M::attention), "",
           "Transformers: `standard` (the (T, S) probabilities saved), `memory_efficient` (FlashAttention-2: "
           "q, k, v, output and log-sum-exp saved, linear in T); \"\": memory_efficient on the CPU from 512 "
           "keys on, standard otherwise (see \"Attention\")")
          .one_of({"", "standard", "memory_efficient"})
          .quoted(),
      boolean("model", "norm_first", in(&C::model, &M::norm_first), "false",
              "BERT: pre-LN layers and a final LayerNorm (`encoder.norm`) instead of BERT's post-LN"),
      unset_by_default(number("model", "stochastic_depth", in(&C::model, &M::stochastic_depth), "-1", 0.0, 0.99,
                              "unset (-1): the preset's own (0.2). EfficientNet's drop-path probability of the last "
                              "block")),

      key("model", "layers", KeyType::Custom, nullptr, "[]",
          "`sequential` (required): the model as PyTorch's `nn.Sequential`, a list of layers with their arguments "
          "(input channels and features inferred): `conv2d(out, kernel, stride=1, padding=0, dilation=1, groups=1, "
          "bias=true)`, `batchnorm2d`, `linear(out, bias=true)`, `maxpool2d(kernel, stride=kernel, padding=0)`, "
          "`avgpool2d(..)`, `adaptive_avgpool2d(size)`, `flatten`, `dropout(p=0.5)`, `layernorm` (after flatten), "
          "any activation by name, and `residual: [..]` (x + body(x)); the last layer gives one logit per class. "
          "Checkpoint names are nn.Sequential's (`0.weight`, `4.body.0.weight`); see `docs/models.md`"),

      key("saved_tensors", "default", KeyType::Custom, nullptr, "fp32",
          "the scheme for every saved tensor no rule matches: a scheme name or `{scheme: .., options..}`"),
      key("saved_tensors", "rules", KeyType::Custom, nullptr, "[]",
          "ordered list; each has `ops: [..]` and/or `layers: [\"layer1.*\"]` (globs) and a scheme with its "
          "options; the first match wins"),

      key("memory", "offload", KeyType::Custom, nullptr, "unset",
          "saved tensors moved to host memory on a side stream after the forward saves them, and prefetched back "
          "`prefetch` nodes ahead of the backward: `{}` every one; `{ops: [..], layers: [..], min_bytes: N, "
          "prefetch: K, in_flight_bytes: B}` (matched as saved_tensors rules are; defaults min_bytes 0, prefetch 2, "
          "in_flight_bytes 268435456: past that many bytes of copies out under way the forward waits for the "
          "oldest, which bounds the device memory they hold); unset: none unless "
          "the preset offloads (`gact-L2`, `actnn-L4`). Needs a GPU; see \"Offload\""),
      text("memory", "plan", in(&C::memory, &Mem::plan), "",
           "`auto`: before training, a short profile measures the peak and speed of each storage level the device "
           "has (FP32, actnn-L2/L3, gact-L1, recompute, gact-CB1/CB2, and offload on a GPU) and trains with the "
           "fastest whose step at data.batch_size fits `memory.budget`, a faster level over the budget also tried with "
           "the fewest of the model's blocks recomputed that fit, and with the stem and the fewest blocks stored as "
           "the fastest level that fits, the rest kept (replacing saved_tensors, memory.recompute, "
           "memory.offload and model.attention); the choice is printed and written to plan.json. See \"Planning "
           "memory\"")
          .one_of({"", "auto"})
          .quoted(),
      text("memory", "budget", in(&C::memory, &Mem::budget), "",
           "bytes a training step may hold, as `--find-max-batch` counts them (parameters, optimizer state, the "
           "batch, activations, saved tensors, gradients, workspace; not a dataset the loader keeps in memory, nor "
           "evaluation), with a unit: `384M`, `16G`; required by `plan: auto`")
          .quoted()
          .then([](Config& c, config::Section& s) {
            const std::string& b = c.memory.budget;
            if (b.empty()) return;
            const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(b.back())));
            if (unit != 'K' && unit != 'M' && unit != 'G')
              refuse(s, "budget", fmt::format("is '{}': give bytes with a unit, K, M or G (384M, 16G)", b));
            if (b.front() == '-') refuse(s, "budget", fmt::format("is '{}': a budget cannot be negative", b));
            try {
              c.memory.budget_bytes = parse_byte_size(b, "memory.budget");
            } catch (const Error& e) {
              refuse(s, "budget", fmt::format("is '{}': {}", b, e.what()));
            }
            if (c.memory.budget_bytes <= 0) refuse(s, "budget", fmt::format("is '{}': must be more than 0", b));
          }),
      number("memory", "max_variance_ratio", in(&C::memory, &Mem::max_variance_ratio), "0.1", 0, 1e6,
             "`plan: auto` refuses an option whose compression adds more gradient variance than this fraction of "
             "the gradient's sampling variance between batches (GACT's criterion, measured on the first training "
             "batches before the plan's check; 0: no bound); see \"Planning memory\"")
          .shortest(),
      key("memory", "recompute", KeyType::TextList, in(&C::memory, &Mem::recompute), "[]",
          "modules whose forward runs again in backward, keeping only their inputs (through the saved-tensor "
          "store): globs on dotted module names (`[\"layer*.*\"]`, `[\"transformer.h.*\"]`; the outermost match "
          "wins) or `blocks` (every residual / transformer block); `[]`: none unless the preset recomputes "
          "(`gact-CB1`); see \"Recomputation\""),

      text("optimizer", "name", in(&C::optimizer, &O::name), "sgd", "the optimizer").one_of([] { return optimizers().names(); }),
      number("optimizer", "lr", in(&C::optimizer, &O::lr), "0.1", 0, 100, "learning rate").shortest(),
      number("optimizer", "momentum", in(&C::optimizer, &O::momentum), "0", 0, 1, "momentum factor").shortest(),
      boolean("optimizer", "nesterov", in(&C::optimizer, &O::nesterov), "false", "needs momentum > 0"),
      number("optimizer", "weight_decay", in(&C::optimizer, &O::weight_decay), "0", 0, 10,
             "sgd: added to the gradient; adamw: decoupled").shortest(),
      number("optimizer", "beta1", in(&C::optimizer, &O::beta1), "0.9", 0, 0.999999, "first-moment decay").shortest(),
      number("optimizer", "beta2", in(&C::optimizer, &O::beta2), "0.999", 0, 0.999999999, "second-moment decay").shortest(),
      number("optimizer", "eps", in(&C::optimizer, &O::eps), "1e-08", 0, 1, "added to the denominator").shortest(),

      text("schedule", "name", in(&C::schedule, &S::name), "constant", "the learning-rate schedule")
          .one_of([] { return lr_schedules().names(); }),
      number("schedule", "warmup_epochs", in(&C::schedule, &S::warmup_epochs), "0", 0, 1e6,
             "linear warmup (may be fractional)").shortest(),
      number("schedule", "min_lr", in(&C::schedule, &S::min_lr), "0", 0, 100, "the cosine's floor").shortest(),
      integer("schedule", "step_size", in(&C::schedule, &S::step_size), "30", 1, 1000000, "epochs between decays"),
      key("schedule", "milestones", KeyType::EpochList, in(&C::schedule, &S::milestones), "[]",
          "epochs at which lr *= gamma (required)"),
      number("schedule", "gamma", in(&C::schedule, &S::gamma), "0.1", 0, 1, "decay factor").shortest(),

      integer("train", "epochs", in(&C::train, &T::epochs), "1", 1, 100000, ""),
      number("train", "label_smoothing", in(&C::train, &T::label_smoothing), "0", 0, 0.999, "").shortest(),
      number("train", "clip_grad_norm", in(&C::train, &T::clip_grad_norm), "0", 0, 1e9, "0: no clipping").shortest(),
      integer("train", "eval_interval", in(&C::train, &T::eval_interval), "1", 1, 100000,
              "evaluate every N epochs (and after the last)"),
      integer("train", "steps_per_epoch", in(&C::train, &T::steps_per_epoch), "0", 0, kMax,
              "0: a full pass over the training set"),
      integer("train", "log_interval", in(&C::train, &T::log_interval), "50", 1, kMax,
              "steps between plain progress lines (not on a terminal)"),
      [] {
        ConfigKey k = text("train", "task", in(&C::train, &T::task), "next_token",
                           "what a text model learns: `next_token` (a GPT: every next byte) or `mlm` (a text encoder: "
                           "BERT's masked language model, 15% of the bytes masked, accuracy over them; see \"Text "
                           "classification\")")
                          .one_of({"next_token", "mlm"})
                          .for_datasets({"text"});
        k.default_from = [](const Config& c) { return encodes_text(c.model.arch) ? "mlm" : "next_token"; };
        k.default_doc = "`next_token` (a GPT), `mlm` (a text encoder)";
        return k;
      }(),
      text("train", "init_from", in(&C::train, &T::init_from), "",
           "a checkpoint file (`RUN/checkpoints/epoch_0003.safetensors`) or a run directory (its latest checkpoint): "
           "a fresh run starts from its parameters and buffers whose names and shapes match the model's, the "
           "optimizer afresh (fine-tuning); a name in both with other shapes is an error, and so is no match at all. "
           "`--resume` continues from the run's own checkpoint instead; see \"Fine-tuning\"")
          .quoted(),

      text("output", "dir", in(&C::output, &Out::dir), "runs/run", "the run directory")
          .quoted()
          .then([](Config& c, config::Section& s) {
            if (c.output.dir.empty()) s.error_at(s.key_path("dir"), s.mark(), "must not be empty");
          }),
      integer("output", "checkpoint_interval", in(&C::output, &Out::checkpoint_interval), "1", 0, 100000,
              "epochs between checkpoints (0: only at the end)"),

      text("distributed", "backend", in(&C::distributed, &Dist::backend), "auto",
           "`auto`: nccl for CUDA tensors, mpi otherwise; see \"Data-parallel training\"")
          .one_of({"auto", "mpi", "nccl"}),
      number("distributed", "timeout_s", in(&C::distributed, &Dist::timeout_s), "300", 0.1, 1e6,
             "a collective not complete by then stops every rank (exit 2)").shortest(),
      boolean("distributed", "sync_batchnorm", in(&C::distributed, &Dist::sync_batchnorm), "false",
              "batchnorm statistics of the global batch (else per rank)"),
      integer("distributed", "bucket_bytes", in(&C::distributed, &Dist::bucket_bytes), "1048576", 4, int64_t{1} << 31,
              "gradients reduced per all-reduce"),
      boolean("distributed", "overlap", in(&C::distributed, &Dist::overlap), "true",
              "start each bucket's all-reduce during the backward"),
  };
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> table = make_table();
  return table;
}

}  // namespace packrat
