#pragma once
// The trainer's typed configuration, parsed from YAML with yaml-cpp. Every key is described once
// in experiments/lib/config_table.cpp (config_key.h), which drives the reader, the resolved-config
// writer and the README's table of keys. Every key is checked:
// unknown keys, wrong types and out-of-range values throw packrat::Error naming the file, the
// dotted key and its line ("configs/q.yaml: data.batch_size (line 7): must be an integer in
// [1, 1048576], got 0"); a value given by --set is named as such ("--set data.batch_size=0").
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autograd/offload/offload_rule.h"
#include "models/registry.h"
#include "optim/registry.h"
#include "quant/policy/rule_policy.h"

namespace packrat {

struct DataConfig {
  std::string dataset;                        // registry name: fashion_mnist, cifar10, text, text_classes, ...
  std::string root;                           // dataset directory; "" = the registry's default
  int64_t batch_size = 128;
  int64_t eval_batch_size = 256;
  std::vector<std::string> train_transforms;  // data::parse_pipeline items, e.g. "random_crop(28, 2)"
  std::vector<std::string> test_transforms;
  int64_t limit_train = 0;                   // use only the first N training images (0: all)
  int64_t limit_test = 0;
  int64_t workers = 1;                        // threads preparing a batch
  int64_t prefetch = 2;                       // batches prepared ahead
  bool download = false;                      // cifar10/100: fetch the archive when missing
  std::string label = "fine";                 // cifar100: fine | coarse
  int64_t height = 0, width = 0;              // image_folder: resize on load (0: keep)
  int64_t channels = 3;                       // image_folder: 3 (RGB) or 1 (grey)
  int64_t seq_len = 0;                        // text, text_classes: tokens per sample (required)
};

struct ScheduleConfig {
  std::string name = "constant";   // a registered schedule: constant | step | multistep | cosine (optim/lr_schedule.h)
  double warmup_epochs = 0;        // linear warmup (may be fractional)
  double min_lr = 0;               // cosine floor
  int64_t step_size = 30;          // step: epochs between decays
  std::vector<int64_t> milestones; // multistep: epochs at which lr *= gamma
  double gamma = 0.1;
};

struct TrainConfig {
  int64_t epochs = 1;
  double label_smoothing = 0;
  double clip_grad_norm = 0;     // 0: no clipping
  int64_t eval_interval = 1;     // evaluate every N epochs (and after the last)
  int64_t steps_per_epoch = 0;   // 0: a full pass over the training set
  int64_t log_interval = 50;     // steps between plain progress lines (not on a terminal)
  // data.dataset text only: next_token (a GPT: next-byte targets) | mlm (a text encoder: BERT's
  // masked language model, data/masked_lm.h). The parser fills in the model's own when unset.
  std::string task = "next_token";
  // A checkpoint file (or a run directory: its latest checkpoint) whose parameters and buffers
  // of matching name and shape initialise a fresh run's model (experiments/lib/init_from.h).
  std::string init_from;
};

struct OutputConfig {
  std::string dir = "runs/run";
  int64_t checkpoint_interval = 1;  // epochs between checkpoints (0: only at the end)
};

// Data-parallel training under mpirun (docs/distributed.md); ignored otherwise.
struct DistributedConfig {
  std::string backend = "auto";          // mpi | nccl | auto (nccl for CUDA tensors, mpi otherwise)
  double timeout_s = 300;                // a collective not complete by then stops every rank, exit 2
  bool sync_batchnorm = false;           // batchnorm statistics of the global batch (else per rank)
  int64_t bucket_bytes = int64_t{1} << 20;  // gradients reduced per all-reduce
  bool overlap = true;                   // start each bucket's all-reduce during the backward
};

// The memory levers other than the storage format (docs: "Recomputation").
struct MemoryConfig {
  // Modules (dotted-name globs, or `blocks`: every residual / transformer block) whose forward
  // runs again in backward instead of keeping what it saves (layers/recompute.h). Empty: none,
  // unless the saved_tensors preset recomputes (gact-CB1: blocks).
  std::vector<std::string> recompute;
  // Saved tensors moved to host memory after the forward saves them and prefetched back for the
  // backward (autograd/offload/); unset: none, unless the saved_tensors preset offloads (gact-L2,
  // actnn-L4: every saved tensor). Needs a GPU.
  std::optional<OffloadRule> offload;
  // "auto": before training, a short profile picks the storage level that fits data.batch_size in
  // `budget` at the best measured speed (experiments/lib/memory_plan.h); "": the config's own.
  std::string plan;
  std::string budget;        // bytes with a unit ("384M", "16G"), as written; "" unset
  int64_t budget_bytes = 0;  // ... parsed (0: unset)
  // plan: auto refuses an option whose compression adds more gradient variance than this
  // fraction of the gradient's sampling variance between batches (GACT's criterion); 0: no bound.
  double max_variance_ratio = 0.1;
};

struct Config {
  uint64_t seed = 0;
  int64_t threads = 0;          // OpenMP threads; 0 = OpenMP's default
  std::string device = "cpu";  // cpu | cuda:N ("cuda" is read as cuda:0); apply_process_settings checks it
  // auto: oneDNN may pick Winograd for 3x3 convolutions (faster, more Workspace memory);
  // direct: direct convolutions only (less memory at the peak); deterministic: on a GPU, only
  // cuDNN algorithms that give the same bits run after run (on the CPU, auto). See core/backend.h.
  std::string conv_algorithm = "auto";
  // fp32 | tf32 | bf16 | fp16, or "" for the device's default (core/autocast.h; run_precision).
  std::string precision;
  DataConfig data;
  // The model as make_model takes it, but in_channels and num_classes (model.in_channels,
  // model.classes) 0 = the data's, and no seed: make_session fills them in.
  ModelSpec model{.in_channels = 0, .num_classes = 0};
  StorePolicySpec saved_tensors;
  OptimizerConfig optimizer;       // optim/registry.h
  ScheduleConfig schedule;
  TrainConfig train;
  OutputConfig output;
  DistributedConfig distributed;
  MemoryConfig memory;
  std::string source;           // the file it came from, for messages
};

// Parses YAML text. `source` names it in errors; `overrides` are "dotted.key=value" strings
// applied before parsing (the value is read as YAML: 256, 0.1, true, [a, b], {scheme: fp32}).
// Sequence items are addressed as rules[1] or rules.1.
Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides = {});
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// A run's own config.yaml, for --resume: also one written by an earlier packrat, whose resolved
// config listed every key (model.width_mult: 1 for a ViT, data.seq_len: 0 for images, ...); such
// keys holding their default are dropped instead of refused as keys the model or data ignores.
Config load_run_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The fully resolved config (every key, defaults included) as YAML; parse_config reads it back
// to an equal Config.
std::string config_to_yaml(const Config& c);

}  // namespace packrat
