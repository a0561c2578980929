// The offload layer (autograd/offload/) on the emulated GPU, whose copy engine runs a copy only
// when asked about it and fills its destination with NaN until then: a step with offload gives
// the same loss and gradients, bit for bit, as without; the device keeps only what the rule
// leaves there and the host pool the rest; nothing is left after the step, or grows over steps;
// a load nobody prefetched still works and is counted; pinned memory that runs out falls back to
// the heap with a warning; a failed copy names its tensor and layer.
#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "autograd/offload/offloader.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "experiments/lib/text_task.h"
#include "experiments/lib/train_loop.h"
#include "models/registry.h"
#include "quant/policy/rule_policy.h"
#include "tests/support/emulated_copy_engine.h"
#include "tests/support/emulated_gpu.h"
#include "tests/support/errors.h"

namespace packrat {
namespace {

using testing::EmulatedCopyEngine;
using testing::EmulatedGpu;

struct Step {
  double loss = 0;
  std::vector<std::vector<float>> grads;  // per parameter, host
  std::vector<SavedRecord> saved;         // after the forward
  int64_t device_saved = 0;               // the device allocator's Saved bytes after the forward (copies out done)
  int64_t device_saved_peak = 0;          // ... its peak over the forward
  int64_t device_forward_peak = 0;        // the device's peak over the forward, every tag
  int64_t host_saved = 0;                 // the host pool's Saved bytes then
  OffloadStats stats;
};

ModelSpec spec_of(const std::string& arch) {
  ModelSpec s;
  s.arch = arch;
  s.num_classes = 10;
  s.seed = 3;
  if (arch == "vit_tiny_cifar") s.image_size = 32;
  return s;
}

StorePolicySpec scheme(const std::string& name) {
  StorePolicySpec p;
  p.default_scheme.scheme = name;
  if (name == "actnn") p.default_scheme.options = {{"bits", "2"}};
  p.seed = 11;
  return p;
}

// One forward + backward of `model` on the emulated GPU under `policy`; `host` is the host pool.
Step step(Module& model, RulePolicy& policy, Allocator& device, Allocator* host, int64_t index = 0) {
  PolicyScope scope(policy);
  policy.begin_step(index);
  const SyntheticBatch b = synthetic_batch(4, 3, 32, 32, 10, 5 + static_cast<uint64_t>(index));
  Step r;
  device.reset_peak();
  {
    TagScope tag(MemTag::Activation);
    const Tensor loss = task_loss(model(b.images.to(EmulatedGpu::device())), b.labels.to(EmulatedGpu::device()), 0.0f);
    if (policy.offloader()) policy.offloader()->finish_copies_out();
    r.saved = policy.describe();
    r.device_saved = device.current(MemTag::Saved);
    r.device_saved_peak = device.peak(MemTag::Saved);
    r.device_forward_peak = device.total_peak();
    r.host_saved = host ? host->current(MemTag::Saved) : 0;
    r.loss = loss.to(Device::cpu()).item();
    backward(loss);
  }
  for (auto& [name, p] : model.named_parameters()) {
    r.grads.push_back(p.grad().to(Device::cpu()).to_vector());
    p.zero_grad();
  }
  if (policy.offloader()) r.stats = policy.offloader()->take_stats();
  return r;
}

int64_t bytes_of(const std::vector<SavedRecord>& records, const std::function<bool(const SavedRecord&)>& which) {
  int64_t n = 0;
  for (const SavedRecord& r : records)
    if (which(r)) n += r.bytes;
  return n;
}

// With offload and without, the same model and batch.
void expect_offload_changes_nothing_but_where(const std::string& arch, const std::string& scheme_name) {
  EmulatedGpu gpu;
  DeviceScope on(EmulatedGpu::device());
  Allocator& host = gpu.copy_engine().host_pool();
  const std::string what = arch + " " + scheme_name;

  auto plain_model = make_model(spec_of(arch));
  RulePolicy plain(scheme(scheme_name));
  const Step a = step(*plain_model, plain, gpu.allocator(), nullptr);

  auto model = make_model(spec_of(arch));
  RulePolicy offloading(scheme(scheme_name), OffloadRule{});
  const Step b = step(*model, offloading, gpu.allocator(), &host);

  EXPECT_EQ(b.loss, a.loss) << what;
  ASSERT_EQ(b.grads.size(), a.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_EQ(b.grads[i], a.grads[i]) << what << " parameter " << i;
  // Every saved byte moved: none left on the device, the same bytes in the host pool.
  EXPECT_GT(a.device_saved, 0) << what;
  EXPECT_EQ(b.device_saved, 0) << what;
  EXPECT_EQ(b.host_saved, a.device_saved) << what;
  EXPECT_EQ(bytes_of(b.saved, [](const SavedRecord&) { return true; }),
            bytes_of(a.saved, [](const SavedRecord&) { return true; }))
      << what << ": the records count the same bytes wherever they lie";
  EXPECT_LT(b.device_saved_peak, a.device_saved_peak) << what;
  EXPECT_GT(b.stats.buffers_out, 10) << what;
  EXPECT_EQ(b.stats.bytes_to_host, a.device_saved) << what;
  EXPECT_EQ(b.stats.bytes_to_device, b.stats.bytes_to_host) << what << ": everything came back once";
  EXPECT_EQ(b.stats.synchronous_loads, 0) << what << ": the tape prefetched every load";
  EXPECT_GT(b.stats.prefetched_loads, 10) << what;
  // Nothing left on either side after the step.
  EXPECT_EQ(gpu.allocator().current(MemTag::Saved), 0) << what;
  EXPECT_EQ(host.current(MemTag::Saved), 0) << what;
  EXPECT_EQ(offloading.offloader()->buffers_held(), 0u) << what;
  EXPECT_EQ(gpu.copy_engine().queued(), 0) << what;
}

TEST(Offload, AResNet20StepIsBitForBitTheSameWithItsSavedTensorsOnTheHost) {
  expect_offload_changes_nothing_but_where("resnet20", "fp32");
  expect_offload_changes_nothing_but_where("resnet20", "actnn");
}

TEST(Offload, AVitTinyStepIsBitForBitTheSameWithItsSavedTensorsOnTheHost) {
  expect_offload_changes_nothing_but_where("vit_tiny_cifar", "fp32");
  expect_offload_changes_nothing_but_where("vit_tiny_cifar", "actnn");
}

TEST(Offload, TheDeviceKeepsWhatTheRuleLeavesThere) {
  EmulatedGpu gpu;
  DeviceScope on(EmulatedGpu::device());
  Allocator& host = gpu.copy_engine().host_pool();
  auto plain_model = make_model(spec_of("resnet20"));
  RulePolicy plain(scheme("actnn"));
  const Step a = step(*plain_model, plain, gpu.allocator(), nullptr);

  OffloadRule convs;
  convs.ops = {"conv2d"};
  convs.layers = {"layer2.*", "layer3.*"};
  auto model = make_model(spec_of("resnet20"));
  RulePolicy offloading(scheme("actnn"), convs);
  const Step b = step(*model, offloading, gpu.allocator(), &host);
  EXPECT_EQ(b.loss, a.loss);
  auto moved = [](const SavedRecord& r) {
    return r.op == "conv2d" && (r.layer.rfind("layer2.", 0) == 0 || r.layer.rfind("layer3.", 0) == 0);
  };
  const int64_t out = bytes_of(a.saved, moved);
  ASSERT_GT(out, 0);
  EXPECT_EQ(b.host_saved, out);
  EXPECT_EQ(b.device_saved, a.device_saved - out);
  // By layer: the host pool holds exactly the layers the rule names.
  for (const auto& [layer, bytes] : host.current_by_layer(MemTag::Saved)) {
    if (bytes > 0) {
      EXPECT_TRUE(layer.rfind("layer2.", 0) == 0 || layer.rfind("layer3.", 0) == 0) << layer;
    }
  }

  // min_bytes keeps the small ones on the device.
  OffloadRule big = convs;
  big.min_bytes = int64_t{1} << 40;
  auto model2 = make_model(spec_of("resnet20"));
  RulePolicy none(scheme("actnn"), big);
  const Step c = step(*model2, none, gpu.allocator(), &host);
  EXPECT_EQ(c.host_saved, 0);
  EXPECT_EQ(c.device_saved, a.device_saved);
  EXPECT_EQ(c.stats.buffers_out, 0);
}

TEST(Offload, NothingGrowsOverAHundredSteps) {
  EmulatedGpu gpu;
  DeviceScope on(EmulatedGpu::device());
  Allocator& host = gpu.copy_engine().host_pool();
  ModelSpec s = spec_of("resnet20");
  auto model = make_model(s);
  RulePolicy offloading(scheme("actnn"), OffloadRule{});
  int64_t first_device = 0, first_host_reserved = 0;
  for (int64_t i = 0; i < 100; ++i) {
    const Step r = step(*model, offloading, gpu.allocator(), &host, i % 3);
    ASSERT_EQ(gpu.allocator().current(MemTag::Saved), 0) << "step " << i;
    ASSERT_EQ(host.current(MemTag::Saved), 0) << "step " << i;
    ASSERT_EQ(offloading.offloader()->buffers_held(), 0u) << "step " << i;
    // The pool reuses its blocks: what it holds stops growing once the batches repeat.
    if (i == 3) {
      first_device = gpu.allocator().total_current() + gpu.allocator().cached_bytes();
      first_host_reserved = host.cached_bytes();
    }
    if (i > 3) {
      ASSERT_LE(host.cached_bytes(), first_host_reserved) << "step " << i;
      ASSERT_LE(gpu.allocator().total_current() + gpu.allocator().cached_bytes(), first_device) << "step " << i;
    }
    ASSERT_GT(r.stats.bytes_to_host, 0);
  }
}

TEST(Offload, ALoadNobodyPrefetchedCopiesThenAndIsCounted) {
  EmulatedGpu gpu;
  DeviceScope on(EmulatedGpu::device());
  RulePolicy offloading(scheme("fp32"), OffloadRule{});
  PolicyScope scope(offloading);
  const Tensor x = Tensor::from_vector({2, 3}, std::vector<float>{1, -2, 3, -4, 5, -6});
  SaveRequest r;
  r.op = "linear";
  r.name = "custom";
  SavedTensorStore& store = offloading.store_for(r);
  const SavedHandle h = store.save(x, r);
  offloading.offloader()->finish_copies_out();
  EXPECT_EQ(gpu.copy_engine().host_pool().current(MemTag::Saved), 24);
  // A custom graph loads it with no backward walking the tape: no prefetch was issued.
  const Tensor back = store.load(h);
  EXPECT_EQ(back.device(), EmulatedGpu::device());
  EXPECT_EQ(back.to(Device::cpu()).to_vector(), (std::vector<float>{1, -2, 3, -4, 5, -6}));
  store.release(h);
  const OffloadStats s = offloading.offloader()->take_stats();
  EXPECT_EQ(s.synchronous_loads, 1);
  EXPECT_EQ(s.prefetched_loads, 0);
  EXPECT_EQ(s.bytes_to_device, 24);
  EXPECT_EQ(gpu.copy_engine().host_pool().current(MemTag::Saved), 0);
}

// Copies that fall behind the forward (a GPU's, on a fast forward) hold their device buffers:
// in_flight_bytes bounds them, the forward waiting for the oldest copy, at no change in the step.
TEST(Offload, CopiesBehindTheForwardHoldAtMostInFlightBytesOfDeviceMemory) {
  EmulatedGpu gpu;
  DeviceScope on(EmulatedGpu::device());
  Allocator& host = gpu.copy_engine().host_pool();
  auto plain_model = make_model(spec_of("resnet20"));
  RulePolicy plain(scheme("fp32"));
  const Step a = step(*plain_model, plain, gpu.allocator(), nullptr);
  int64_t largest = 0;  // one save's payload
  for (const SavedRecord& r : a.saved) largest = std::max(largest, r.bytes);

  gpu.copy_engine().lag_copies_to_host(true);
  int64_t waited_each = 0;  // the forward's peak with in_flight_bytes 0
  for (int64_t window : {int64_t{1} << 40, int64_t{0}, int64_t{1} << 20}) {
    OffloadRule rule;
    rule.in_flight_bytes = window;
    auto model = make_model(spec_of("resnet20"));
    RulePolicy offloading(scheme("fp32"), rule);
    const Step b = step(*model, offloading, gpu.allocator(), &host);
    const std::string what = "in_flight_bytes " + std::to_string(window);
    EXPECT_EQ(b.loss, a.loss) << what;
    EXPECT_EQ(b.grads, a.grads) << what;
    EXPECT_EQ(b.host_saved, a.device_saved) << what;
    if (window > a.device_saved_peak) {  // unbounded: the device held all it saved to the forward's end
      EXPECT_EQ(b.stats.forward_waits, 0) << what;
      EXPECT_GE(b.device_forward_peak, a.device_forward_peak) << what;
    } else if (window == 0) {  // each copy waited for: under half of the plain forward's peak here
      EXPECT_GT(b.stats.forward_waits, 0) << what;
      EXPECT_LT(b.device_forward_peak, a.device_forward_peak / 2) << what;
      waited_each = b.device_forward_peak;
    } else {  // at most the window (and the save that crossed it) above that
      EXPECT_GT(b.stats.forward_waits, 0) << what;
      EXPECT_LE(b.device_forward_peak, waited_each + window + largest) << what;
      EXPECT_GT(b.device_forward_peak, waited_each) << what;
    }
  }
}

TEST(Offload, PinnedMemoryThatRunsOutFallsBackToTheHeapWithAWarningNamingTheBytes) {
  EmulatedGpu gpu;
  DeviceScope on(EmulatedGpu::device());
  gpu.copy_engine().refuse_pinned_above(1000);
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  auto plain_model = make_model(spec_of("resnet20"));
  RulePolicy plain(scheme("actnn"));
  const Step a = step(*plain_model, plain, gpu.allocator(), nullptr);
  auto model = make_model(spec_of("resnet20"));
  RulePolicy offloading(scheme("actnn"), OffloadRule{});
  const Step b = step(*model, offloading, gpu.allocator(), &gpu.copy_engine().host_pool());
  spdlog::set_default_logger(previous);
  EXPECT_EQ(b.loss, a.loss);
  EXPECT_EQ(b.grads, a.grads);
  EXPECT_NE(log.str().find("page-locked host memory refused"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find(" bytes"), std::string::npos) << log.str();
  EXPECT_GT(gpu.copy_engine().pageable_bytes(), 0) << "the blocks over 1000 bytes came from the heap";
}

TEST(Offload, AFailedCopyNamesItsTensorAndLayer) {
  EmulatedGpu gpu;
  DeviceScope on(EmulatedGpu::device());
  gpu.copy_engine().fail_copies_of("layer2.0.conv1");
  auto model = make_model(spec_of("resnet20"));
  RulePolicy offloading(scheme("actnn"), OffloadRule{});
  PolicyScope scope(offloading);
  const SyntheticBatch b = synthetic_batch(2, 3, 32, 32, 10, 5);
  const std::string msg = testing::message_of([&] {
    const Tensor loss = task_loss((*model)(b.images.to(EmulatedGpu::device())), b.labels.to(EmulatedGpu::device()), 0.0f);
    offloading.offloader()->finish_copies_out();
  });
  EXPECT_NE(msg.find("conv2d layer2.0.conv1: saved buffer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("copy to the host on cuda:1000 failed"), std::string::npos) << msg;
  clear_tape();
  for (auto& [name, p] : model->named_parameters()) p.zero_grad();
}

}  // namespace
}  // namespace packrat
