#include "experiments/lib/session.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "core/autocast.h"
#include "core/backend.h"
#include "core/device_runtime.h"

#include "core/parallel.h"
#include "data/text.h"
#include "data/text_classes.h"
#include "data/transforms.h"
#include "layers/dropout.h"
#include "layers/recompute.h"
#include "models/registry.h"
#include "optim/registry.h"
#include "quant/group/gact_store.h"
#include "quant/policy/presets.h"

namespace packrat {

InputSpec input_spec(const Config& c, const data::ImageShape& raw, int64_t classes) {
  const data::ImageShape s = data::parse_pipeline(c.data.train_transforms).output_shape(raw);
  check_in_channels(c, s.c);
  InputSpec in{s.c, s.h, s.w, classes};
  if (classes > 0) check_classes(c, classes);
  if (c.model.num_classes > 0) in.classes = c.model.num_classes;
  return in;
}

void check_classes(const Config& c, int64_t data_classes) {
  // Fewer outputs than classes fails deep inside the cross-entropy (a label past the logits).
  PACKRAT_CHECK(c.model.num_classes == 0 || c.model.num_classes >= data_classes,
                "{}: model.classes is {}, but the {} data has {} classes (labels 0..{}): remove model.classes (the model "
                "takes the dataset's) or set it to at least {}",
                c.source, c.model.num_classes, c.data.dataset, data_classes, data_classes - 1, data_classes);
}

void check_in_channels(const Config& c, int64_t data_channels) {
  PACKRAT_CHECK(c.model.in_channels == 0 || c.model.in_channels == data_channels,
                "{}: model.in_channels is {}, but the {} images have {} channel(s): remove model.in_channels (the "
                "model takes the data's channels) or set it to {}",
                c.source, c.model.in_channels, c.data.dataset, data_channels, data_channels);
}

InputSpec synthetic_input_spec(const Config& c) {
  const std::string& d = c.data.dataset;
  data::ImageShape raw;
  int64_t classes = 0;
  if (d == "fashion_mnist" || d == "mnist") {
    raw = {1, 28, 28};
    classes = 10;
  } else if (d == "cifar10") {
    raw = {3, 32, 32};
    classes = 10;
  } else if (d == "cifar100") {
    raw = {3, 32, 32};
    classes = c.data.label == "coarse" ? 20 : 100;
  } else if (d == "image_folder") {
    PACKRAT_CHECK(c.data.height > 0 && c.data.width > 0 && c.model.num_classes > 0,
                  "{}: synthetic inputs for an image_folder dataset need data.height, data.width and model.classes",
                  c.source);
    raw = {c.data.channels, c.data.height, c.data.width};
  } else if (d == "text") {
    PACKRAT_CHECK(c.data.seq_len >= 1, "{}: data.seq_len is {}; a text dataset needs it at least 1", c.source,
                  c.data.seq_len);
    raw = {1, 1, c.data.seq_len};  // (N, T) tokens; see data/text.h
    classes = data::kTextVocab;
  } else if (d == "text_classes") {
    PACKRAT_CHECK(c.data.seq_len >= 2, "{}: data.seq_len is {}; a text_classes sample needs at least 2 tokens (the "
                  "class token and a byte)", c.source, c.data.seq_len);
    raw = {1, 1, c.data.seq_len};  // (N, T) tokens; see data/text_classes.h
    // The classes are the files in data.root (listed, not parsed), unless model.classes says.
    if (c.model.num_classes == 0) {
      const std::string root = c.data.root.empty() ? data::default_root(d) : c.data.root;
      try {
        classes = static_cast<int64_t>(data::text_class_names(root, "data.root").size());
      } catch (const Error& e) {
        fail("{}: {}", c.source, e.what());
      }
    }
  } else {
    fail("{}: data.dataset '{}' is unknown (cifar10, cifar100, fashion_mnist, mnist, image_folder, text, text_classes)",
         c.source, d);
  }
  return input_spec(c, raw, classes);
}

data::DatasetSpec dataset_spec(const Config& c, data::Split split) {
  data::DatasetSpec s;
  s.name = c.data.dataset;
  s.root = c.data.root;
  s.split = split;
  s.download = c.data.download;
  s.label = c.data.label;
  s.height = c.data.height;
  s.width = c.data.width;
  s.channels = c.data.channels;
  s.seq_len = c.data.seq_len;
  return s;
}

void check_device_can_train(const Config& c) {
  const Device device = Device::parse(c.device);
  if (const auto offload = offload_rule(c); offload && device.is_cpu())
    fail("{}: {} moves saved tensors to host memory, but the device is the CPU, which has no second memory to move "
         "them to: run on a GPU (device: cuda:0), or remove it{}",
         c.source, offload->where, c.memory.offload ? "" : " (the same storage without offload: gact-L1, actnn-L3)");
  if (device.is_cpu()) return;
  try {
    backend(device);  // throws: CUDA not built, no GPU visible, no such GPU
  } catch (const Error& e) {
    fail("{}: {}", c.source, e.what());  // every reason above starts with "device cuda:N:"
  }
}

RunPrecision run_precision(const Config& c) {
  const Device device = Device::parse(c.device);
  RunPrecision r;
  if (c.precision.empty()) {
    r.precision = device.is_cpu() ? Precision::fp32 : Precision::tf32;
    r.tf32 = Tf32Use{!device.is_cpu(), false};
    r.describe = device.is_cpu() ? "precision fp32 (the CPU's default)"
                                 : "precision: PyTorch's GPU default, TF32 convolutions and f32 matmuls (precision: fp32 "
                                   "for exact f32, tf32 for TF32 matmuls too)";
    return r;
  }
  const auto p = precision_from_name(c.precision);
  PACKRAT_CHECK(p.has_value(), "{}: precision is '{}', must be fp32, tf32, bf16 or fp16", c.source, c.precision);
  r.precision = *p;
  r.tf32 = Tf32Use{*p == Precision::tf32, *p == Precision::tf32};
  const DType d = precision_dtype(*p);
  if (!is_half(d)) {
    r.describe = fmt::format("precision {}{}", c.precision,
                             device.is_cpu() && *p == Precision::tf32 ? " (on the CPU: exact f32, no TF32)" : "");
  } else if (backend(device).computes_in(d)) {
    r.describe = fmt::format("precision {}: autocast, convolutions, linear layers, matmuls in {} kernels", c.precision,
                             dtype_name(d));
  } else {
    const bool convolutions = backend(device).conv_computes_in(d);
    r.describe = fmt::format(
        "precision {}: autocast; {}this {} has no {} kernels for {}, so they compute in f32 on {}-rounded values{} (the "
        "same numbers and saved bytes, not the speed){}",
        c.precision, convolutions ? fmt::format("convolutions in {} kernels; ", dtype_name(d)) : "",
        device.is_cpu() ? "CPU" : "device", dtype_name(d),
        convolutions ? "linear layers and matmuls" : "convolutions, linear layers and matmuls", dtype_name(d),
        device.is_cpu() ? "" : ", on TF32 tensor cores, which hold them exactly",
        *p == Precision::fp16 ? "; loss scaling from 65536" : "");
  }
  return r;
}

RunDevice::RunDevice(const Config& c) : RunDevice(c, run_precision(c)) {}

RunDevice::RunDevice(const Config& c, const RunPrecision& p)
    : device_(Device::parse(c.device)), scope_(device_), autocast_(precision_dtype(p.precision)),
      previous_tf32_(tf32_use()) {
  make_current(device_);
  set_tf32_use(p.tf32);
}

RunDevice::~RunDevice() { set_tf32_use(previous_tf32_); }

namespace {
// The OpenMP threads the process would start with threads: 0, from OMP_NUM_THREADS (its first
// entry: "8,4" nests); 0 when it is unset or not a number (OpenMP then takes the processors).
int64_t omp_num_threads_env() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (v == nullptr) return 0;
  int64_t n = 0;
  const char* end = v + std::strcspn(v, ",");
  const auto [p, ec] = std::from_chars(v + std::strspn(v, " "), end, n);
  return ec == std::errc() ? n : 0;
}
}  // namespace

void apply_process_settings(const Config& c) {
  check_device_can_train(c);
  // Said once while it holds: memory.plan's trials apply the settings again for each option.
  static std::string said;
  if (std::string precision = run_precision(c).describe; precision != said) {
    spdlog::info("{}", precision);
    said = std::move(precision);
  }
  // More OpenMP threads than processors wait on each other at every barrier: a few too many (a
  // config from a bigger machine) cost some speed and get a warning; far too many (threads: 1024
  // on 2 cores ran 50x slower; OMP_NUM_THREADS=100000 crashed starting them) are refused.
  // threads: 0 takes OMP_NUM_THREADS when it is set, so that is checked the same way.
  const bool from_env = c.threads == 0;
  const int64_t threads = from_env ? omp_num_threads_env() : c.threads;
  const std::string what = from_env ? fmt::format("OMP_NUM_THREADS is {} (with threads: 0 in {})", threads, c.source)
                                    : fmt::format("{}: threads is {}", c.source, threads);
  const std::string way_out = from_env ? "unset OMP_NUM_THREADS or set it to at most" : "use threads: 0 (OpenMP's default) or at most";
  if (threads > 0) {
    const int procs = std::max(1, omp_get_num_procs());
    PACKRAT_CHECK(threads <= int64_t{kMaxThreadsPerProcessor} * procs,
                  "{}, but this process can use {} processor(s): that many OpenMP threads wait on each other and run "
                  "many times slower (more than {}x the processors is refused); {} {}",
                  what, procs, kMaxThreadsPerProcessor, way_out, procs);
    if (threads > procs)
      spdlog::warn("{}, more than the {} processor(s) this process can use: expect a slower run ({} {})", what, procs,
                   way_out, procs);
    if (!from_env) set_num_threads(static_cast<int>(c.threads));
  }
  set_conv_algorithm(c.conv_algorithm == "direct"          ? ConvAlgorithm::Direct
                     : c.conv_algorithm == "deterministic" ? ConvAlgorithm::Deterministic
                                                           : ConvAlgorithm::Auto);
  set_dropout_seed(c.seed);
}

namespace {

// The default scheme, then each rule's.
std::vector<const SchemeSpec*> scheme_specs(const Config& c) {
  std::vector<const SchemeSpec*> out{&c.saved_tensors.default_scheme};
  for (const StoreRule& r : c.saved_tensors.rules) out.push_back(&r.spec);
  return out;
}

// Whether the default scheme or a rule's is a preset for which `has` holds.
bool some_preset(const Config& c, bool (*has)(const std::string& scheme)) {
  for (const SchemeSpec* s : scheme_specs(c))
    if (has(s->scheme)) return true;
  return false;
}

}  // namespace

std::vector<std::string> recompute_globs(const Config& c) {
  if (!c.memory.recompute.empty()) return c.memory.recompute;
  return some_preset(c, preset_recomputes_blocks) ? std::vector<std::string>{"blocks"} : std::vector<std::string>{};
}

std::optional<OffloadRule> offload_rule(const Config& c) {
  if (c.memory.offload) return c.memory.offload;
  for (const SchemeSpec* s : scheme_specs(c))
    if (preset_offloads(s->scheme)) {
      OffloadRule every;
      every.where = fmt::format("{} (preset {})", s->where, s->scheme);
      return every;
    }
  return std::nullopt;
}

std::string attention_algorithm(const Config& c) {
  if (!c.model.attention.empty()) return c.model.attention;
  return some_preset(c, preset_uses_memory_efficient_attention) ? "memory_efficient" : "";
}

Session make_session(const Config& c, const InputSpec& input) {
  Session s;
  s.input = input;
  // A ViT's patches tile a square of model.image_size (unset: the input's side): a mismatch is
  // named here, with the key or the data at fault, not by the first forward as model.image_size.
  const std::vector<std::string>& reads = model_keys(c.model.arch);
  if (std::find(reads.begin(), reads.end(), "image_size") != reads.end()) {
    PACKRAT_CHECK(input.height == input.width,
                  "{}: {} takes square images, but the {} training images are {}x{} (H x W) after "
                  "data.train_transforms: make them square (resize(...) or random_crop(...) in data.train_transforms; "
                  "for image_folder, data.height = data.width)",
                  c.source, c.model.arch, c.data.dataset, input.height, input.width);
    PACKRAT_CHECK(c.model.image_size == 0 || c.model.image_size == input.height,
                  "{}: model.image_size is {}, but the {} training images are {}x{} after data.train_transforms: remove "
                  "model.image_size (the model takes the images' side) or resize the images to it",
                  c.source, c.model.image_size, c.data.dataset, input.height, input.width);
  }
  // The config's model with what the data decides: channels, classes and (ViTs) the image side.
  ModelSpec spec = c.model;
  spec.in_channels = input.channels;
  spec.num_classes = input.classes;
  spec.seed = c.seed;
  spec.attention = attention_algorithm(c);
  if (spec.image_size == 0) spec.image_size = input.height;  // vit_*
  // A text encoder's head: a classifier of the classes (text_classes, logits (N, classes)) or the
  // masked-language-model head over the bytes (text with train.task mlm, logits (N, T, 256)).
  if (encodes_text(c.model.arch)) spec.text_head = c.data.dataset == "text_classes" ? "classes" : "tokens";
  s.model = make_model(spec);
  try {
    check_rule_layers(c.saved_tensors, s.model->module_names(), c.model.arch);
  } catch (const Error& e) {
    fail("{}: {}", c.source, e.what());
  }
  try {
    s.recomputed = apply_recompute(*s.model, recompute_globs(c));
  } catch (const Error& e) {
    fail("{}: {}", c.source, e.what());
  }
  s.optimizer = make_optimizer(s.model->named_parameters(), c.optimizer);
  s.policy = make_policy(c, *s.model);
  return s;
}

std::unique_ptr<RulePolicy> make_policy(const Config& c, const Module& model) {
  auto policy = std::make_unique<RulePolicy>(c.saved_tensors, offload_rule(c));
  // What the stores need to know of the model (GACT's analytic estimator: the kernel sizes).
  const auto named = model.named_parameters();
  for (SavedTensorStore* st : policy->stores()) st->observe_model(named);
  // GACT's `variance: auto`: relative units under an optimizer that normalises each parameter's
  // update (every one but SGD).
  for (GactStore* g : find_gact_stores(*policy)) g->set_update_normalised(c.optimizer.name != "sgd");
  return policy;
}

LrSchedule make_schedule(const Config& c, int64_t steps_per_epoch) {
  LrScheduleConfig s;
  s.kind = c.schedule.name;
  s.base_lr = c.optimizer.lr;
  s.epochs = c.train.epochs;
  s.steps_per_epoch = std::max<int64_t>(1, steps_per_epoch);
  s.step_size = c.schedule.step_size;
  s.milestones = c.schedule.milestones;
  s.gamma = c.schedule.gamma;
  s.min_lr = c.schedule.min_lr;
  s.warmup_epochs = c.schedule.warmup_epochs;
  return LrSchedule(s);
}

}  // namespace packrat
