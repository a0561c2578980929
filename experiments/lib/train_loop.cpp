#include "experiments/lib/train_loop.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/backend.h"
#include "core/device_runtime.h"
#include "core/philox.h"
#include "data/masked_lm.h"
#include "experiments/lib/text_task.h"
#include "optim/clip_grad.h"

namespace packrat {

Device model_device(const Module& model) {
  const auto params = model.named_parameters();
  return params.empty() ? DeviceScope::current() : params.front().second.device();
}

Hits count_correct(const Tensor& logits, const Tensor& labels) {
  // The argmax on the host: logits are a small result ((N, C); (N, T, V) of a token model).
  const Tensor l = logits.to_plain().to(Device::cpu()).to(DType::f32);  // bf16 logits under autocast
  const Tensor host_labels = labels.to(Device::cpu());
  const int64_t c = l.dim(l.rank() - 1), n = l.numel() / c;
  const float* x = l.data<float>();
  const int64_t* y = host_labels.data<int64_t>();
  Hits h;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] == data::kIgnoreTarget) continue;
    int64_t best = 0;
    for (int64_t k = 1; k < c; ++k)
      if (x[i * c + k] > x[i * c + best]) best = k;
    h.correct += best == y[i];
    ++h.count;
  }
  return h;
}

namespace {

// The adaptive stores' refresh (SavedTensorStore::refresh; GACT's sensitivities, when due:
// gradient evaluations on this step's batch that differ only in one tensor's quantization noise).
// They must not change the model: the batchnorm running statistics they update are restored
// afterwards. Every evaluation draws the step's dropout and drop-path masks: the mask streams are
// rewound before each, and after the last, so that the evaluations differ only in quantization
// noise (fresh masks in each made every tensor's measured sensitivity the masks' variance) and
// the step draws the masks it would have drawn without a refresh.
void refresh_stores(Module& model, Optimizer& opt, const std::vector<SavedTensorStore*>& stores, const Tensor& images,
                    const Tensor& labels, int64_t step, const StepOptions& o) {
  if (stores.empty()) return;
  std::vector<std::pair<Tensor, Tensor>> buffers;  // (live buffer, copy)
  for (auto& [name, b] : model.named_buffers()) {
    TagScope tag(MemTag::Workspace);
    buffers.emplace_back(b, b.clone());
  }
  const std::vector<std::pair<std::string, MaskStream*>> streams = model.named_mask_streams();
  std::vector<MaskStream> at_step;  // (streams) the counters the step starts from
  for (const auto& [name, s] : streams) at_step.push_back(*s);
  const auto rewind_masks = [&] {
    for (size_t i = 0; i < streams.size(); ++i) *streams[i].second = at_step[i];
  };
  const SavedTensorStore::GradFn grads = [&]() {
    rewind_masks();
    opt.zero_grad();
    {
      TagScope tag(MemTag::Activation);
      Tensor loss = task_loss(model(images), labels, static_cast<float>(o.label_smoothing));
      backward(loss);
    }
    std::vector<Tensor> out;
    TagScope tag(MemTag::Workspace);
    for (const Tensor& p : model.parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
    opt.zero_grad();
    return out;
  };
  for (SavedTensorStore* s : stores)
    if (s->refresh(step, grads) && o.sync) o.sync->after_store_refresh(*s);
  for (auto& [live, copy] : buffers) {
    backend_of(live).copy(copy, live);
    live.bump_version();
  }
  rewind_masks();
}

}  // namespace

StepResult train_step(Module& model, Optimizer& opt, StorePolicy& policy, const Tensor& host_images,
                      const Tensor& host_labels, int64_t step, const StepOptions& o) {
  const Device device = model_device(model);
  Allocator& alloc = Allocator::of(device);
  Tensor images, labels;  // on the model's device (a copy queued from a host batch)
  {
    TagScope tag(MemTag::Data);
    images = host_images.to(device);
    labels = host_labels.to(device);
  }
  StepResult r;
  PolicyScope scope(policy);
  policy.begin_step(step);
  model.train();
  const std::vector<SavedTensorStore*> stateful = stateful_stores(policy);  // the step's adaptive stores
  refresh_stores(model, opt, stateful, images, labels, step, o);
  opt.zero_grad();
  const int64_t saved_before = alloc.current(MemTag::Saved);
  alloc.reset_peak();
  Offloader* offloader = policy.offloader();
  CopyEngine* engine = offloader ? backend(device).copy_engine() : nullptr;
  if (engine) engine->host_pool().reset_peak();
  alloc.mark("forward");  // the phases, for a memory timeline (--memory-timeline)
  reset_recompute_stats();
  using Clock = std::chrono::steady_clock;
  const auto forward_start = Clock::now();
  try {
    Tensor loss;
    {
      TagScope tag(MemTag::Activation);
      Tensor logits = model(images);
      loss = task_loss(logits, labels, static_cast<float>(o.label_smoothing));
      const Hits hits = count_correct(logits, labels);  // images, tokens, or masked tokens
      r.correct = hits.correct;
      r.count = hits.count;
    }
    r.loss = loss.to(Device::cpu()).item();
    r.forward_s = std::chrono::duration<double>(Clock::now() - forward_start).count();
    if (!std::isfinite(r.loss) && !o.allow_non_finite_loss)
      fail("step {}: the loss is {} (not finite); try a lower optimizer.lr (now {:g}), gradient clipping "
           "(train.clip_grad_norm: 1.0), or FP32 storage for the saved tensors (saved_tensors.default: fp32)",
           step, r.loss, opt.lr());
    // After the forward, before the backward: what the stores hold for this step (with offload,
    // once the copies to the host are done: the host waits for them on this step only).
    if (engine && o.capture_saved) {
      offloader->finish_copies_out();
      r.offload.device_by_layer = alloc.current_by_layer(MemTag::Saved);
      r.offload.host_by_layer = engine->host_pool().current_by_layer(MemTag::Saved);
      r.offload.device_saved = alloc.current(MemTag::Saved) - saved_before;
      r.offload.host_saved = engine->host_pool().current(MemTag::Saved);
    }
    r.saved_allocator_bytes = alloc.current(MemTag::Saved) - saved_before + r.offload.host_saved;  // both sides
    if (o.capture_saved) r.saved = policy.describe();
    for (const auto& rec : o.capture_saved ? r.saved : policy.describe()) {
      r.saved_record_bytes += rec.bytes;
      r.saved_record_fp32_bytes += rec.fp32_bytes;
      r.saved_record_f32_bytes += rec.f32_bytes;
    }
    if (o.sync) o.sync->before_backward(r.count, o.global_count > 0 ? o.global_count : r.count);
    alloc.mark("backward");
    const auto backward_start = Clock::now();
    backward(o.scaler ? o.scaler->scale_loss(loss) : loss);
    if (o.time_phases) synchronize(device);
    r.backward_s = std::chrono::duration<double>(Clock::now() - backward_start).count();
    r.recompute = recompute_stats();
    if (engine) {
      r.offload.on = true;
      r.offload.moved = offloader->take_stats();
      r.offload.host_peak = engine->host_pool().peak(MemTag::Saved);
      r.offload.host_pool_bytes = engine->host_pool().total_current() + engine->host_pool().cached_bytes();
      r.offload.pageable_bytes = engine->pageable_bytes();
    }
    // After a resume: the restored state belongs to what this config saves (GACT: the tensors it
    // quantizes are those of the checkpoint; with recomputation some are saved in the backward).
    for (SavedTensorStore* s : stateful) s->check_restored_step();
    if (o.sync) o.sync->after_backward();
    if (o.after_backward) o.after_backward(model);
    if (o.scaler) {
      r.skipped = !o.scaler->unscale(model.parameters());
      o.scaler->update(r.skipped);
    }
    // The adaptive stores see every step's gradient (GACT's warning compares its predicted
    // compression variance with the gradient's sampling variance, estimated from them).
    if (!stateful.empty() && !r.skipped) {
      std::vector<Tensor> grads;
      for (const Tensor& p : model.parameters()) grads.push_back(p.grad());
      for (SavedTensorStore* s : stateful) s->observe_gradients(grads);
    }
  } catch (...) {
    if (o.sync) o.sync->abandon();
    clear_tape();  // releases whatever the stores still hold for this step
    opt.zero_grad();
    throw;
  }
  if (r.skipped) {  // fp16: an inf / NaN gradient; the scale has backed off, the parameters stay
    opt.zero_grad();
    r.memory = alloc.stats();
    return r;
  }
  alloc.mark("update");
  if (o.clip_grad_norm > 0) r.grad_norm = clip_grad_norm(model.parameters(), o.clip_grad_norm);
  opt.step();
  opt.zero_grad();  // gradients do not outlive the step
  r.memory = alloc.stats();
  return r;
}

EvalResult evaluate(Module& model, data::Loader& loader, int64_t epoch) {
  NoGradScope no_grad;
  model.eval();
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  const Device device = model_device(model);
  loader.start_epoch(epoch);
  for (data::Batch b; loader.next(b);) {
    Tensor images, labels;
    {
      TagScope tag(MemTag::Data);
      images = b.images.to(device);
      labels = b.labels.to(device);
    }
    Tensor logits = model(images);
    const Hits hits = count_correct(logits, labels);  // images, tokens, or masked tokens
    loss_sum += static_cast<double>(task_loss(logits, labels, 0.0f).to(Device::cpu()).item()) *
                static_cast<double>(hits.count);
    correct += hits.correct;
    r.count += hits.count;
  }
  model.train();
  if (r.count > 0) {
    r.loss = loss_sum / static_cast<double>(r.count);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.count);
  }
  return r;
}

SyntheticBatch synthetic_batch(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed) {
  TagScope tag(MemTag::Data);
  SyntheticBatch b;
  // On the host (filled here); train_step copies them to the model's device.
  b.images = Tensor::empty(Shape{n, c, h, w}, DType::f32, Layout::Plain, MemTag::Data, Device::cpu());  // (N, C, H, W)
  b.labels = Tensor::empty(Shape{n}, DType::i64, Layout::Plain, MemTag::Data, Device::cpu());  // (N)
  PhiloxStream rng(seed, 0x5E17ull);
  float* x = b.images.data<float>();
  for (int64_t i = 0; i < b.images.numel(); ++i) x[i] = rng.normal();
  int64_t* y = b.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int64_t>(rng.below(static_cast<uint64_t>(classes)));
  return b;
}

}  // namespace packrat
