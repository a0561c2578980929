#pragma once
// What every trainer mode builds from a Config: the model, the optimizer, the store policy,
// the LR schedule, the input shape, and the process settings (threads, seeds).
#include <cstdint>
#include <memory>

#include "core/autocast.h"
#include "data/dataset.h"
#include "data/registry.h"
#include "experiments/lib/config.h"
#include "layers/module.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "quant/policy/rule_policy.h"

namespace packrat {

// The shape a batch image has after the train transforms, and the number of classes.
struct InputSpec {
  int64_t channels = 0, height = 0, width = 0, classes = 0;
};

// Without opening any data file (for synthetic inputs): the dataset's published shape and class
// count, through the configured train transforms; model.classes overrides the class count,
// model.in_channels must agree with the data's channels (check_in_channels).
InputSpec synthetic_input_spec(const Config& c);
// From an opened dataset's image shape and classes, through the train transforms.
InputSpec input_spec(const Config& c, const data::ImageShape& raw, int64_t classes);

// Throws naming the config when model.in_channels is set and differs from the data's channels.
void check_in_channels(const Config& c, int64_t data_channels);
// Throws naming model.classes when it is set below the data's number of classes.
void check_classes(const Config& c, int64_t data_classes);

data::DatasetSpec dataset_spec(const Config& c, data::Split split);

// Throws packrat::Error naming the config and the reason when c.device cannot train here: CUDA
// not built, no GPU visible, no such GPU, or a backend without the kernels training needs.
void check_device_can_train(const Config& c);

// The device check above, the precision's log line (run_precision), OpenMP threads, the dropout
// seed. threads above the processors this process may use get a warning, above
// kMaxThreadsPerProcessor times them an error.
constexpr int kMaxThreadsPerProcessor = 4;
void apply_process_settings(const Config& c);

// The precision c runs in: c.precision, or the device's default ("" -> fp32 on the CPU, tf32
// convolutions on a GPU). A 16-bit precision runs on every device: natively where the backend
// computes_in it, else at the kernels' edges (core/autocast.h), which `describe` says.
struct RunPrecision {
  Precision precision = Precision::fp32;
  Tf32Use tf32;          // what the GPU's f32 convolutions and matmuls may use
  std::string describe;  // one line for the log: what computes in what, and why
};
RunPrecision run_precision(const Config& c);

// The config's device for everything a mode builds while this lives (the model, the optimizer
// state, every buffer, activation and saved tensor): the thread's DeviceScope, and the GPU made
// the thread's current device (kernels launch there: cuda:1 runs on the second GPU).
// Also the run's precision: its autocast scope on this thread, and the GPU's TF32 use (the
// previous use restored when it ends).
class RunDevice {
 public:
  explicit RunDevice(const Config& c);
  ~RunDevice();
  RunDevice(const RunDevice&) = delete;
  RunDevice& operator=(const RunDevice&) = delete;
  Device device() const { return device_; }

 private:
  RunDevice(const Config& c, const RunPrecision& p);
  Device device_;
  DeviceScope scope_;
  AutocastScope autocast_;
  Tf32Use previous_tf32_;
};

struct Session {
  std::shared_ptr<Module> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<RulePolicy> policy;
  InputSpec input;
  std::vector<std::string> recomputed;  // the modules run as checkpoint segments (memory.recompute)
};
// model.attention as the config says, or memory_efficient where a preset asks for it (gact-CB2).
std::string attention_algorithm(const Config& c);
// memory.recompute as the config says, or [blocks] where a preset recomputes (gact-CB1).
std::vector<std::string> recompute_globs(const Config& c);
// memory.offload as the config says, or every saved tensor where a preset offloads (gact-L2,
// actnn-L4); nullopt: nothing offloaded.
std::optional<OffloadRule> offload_rule(const Config& c);
Session make_session(const Config& c, const InputSpec& input);
// The config's saved-tensor policy for `model` (make_session's; a fresh one per --find-max-batch
// trial): the rules and offload, the stores told of the model and of the optimizer.
std::unique_ptr<RulePolicy> make_policy(const Config& c, const Module& model);

LrSchedule make_schedule(const Config& c, int64_t steps_per_epoch);

}  // namespace packrat
