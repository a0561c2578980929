#include "distributed/gradient_reducer.h"

#include <chrono>

#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/backend.h"

namespace packrat::dist {

GradientReducer::GradientReducer(Communicator& comm, std::vector<Tensor> params, ReducerOptions o)
    : comm_(comm), params_(std::move(params)), options_(o) {
  PACKRAT_CHECK(o.bucket_bytes >= 4, "distributed.bucket_bytes must be at least 4, got {}", o.bucket_bytes);
  bucket_of_.resize(params_.size());
  offset_of_.resize(params_.size());
  copied_.resize(params_.size());
  // Reverse registration order: the last layers' gradients are final first.
  std::vector<std::vector<size_t>> groups;
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    PACKRAT_CHECK(p.dtype() == DType::f32, "data-parallel gradients: parameter {} has dtype {}, only f32 is reduced", k,
                  dtype_name(p.dtype()));
    const int64_t b = p.numel() * 4;
    if (groups.empty() || (bytes > 0 && bytes + b > options_.bucket_bytes)) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += b;
    index_[p.autograd_meta().get()] = k;
  }
  // Buckets live where the parameters do (a GPU's buckets are reduced by NCCL in place).
  const Device device = params_.empty() ? Device::cpu() : params_.front().device();
  for (const Tensor& p : params_)
    PACKRAT_CHECK(p.device() == device, "data-parallel gradients: parameters on {} and on {}; one device per process",
                  device.str(), p.device().str());
  DeviceScope on(device);
  TagScope tag(MemTag::Gradient);
  for (const auto& g : groups) {
    Bucket b;
    int64_t numel = 0;
    for (size_t k : g) {
      bucket_of_[k] = buckets_.size();
      offset_of_[k] = numel;
      b.offset.push_back(numel);
      numel += params_[k].numel();
    }
    b.params = g;
    b.flat = Tensor::empty(Shape{numel});  // (numel) f32
    buckets_.push_back(std::move(b));
  }
}

GradientReducer::~GradientReducer() {
  if (active_) set_gradient_ready_hook(nullptr);
}

void GradientReducer::begin(double share) {
  PACKRAT_CHECK(!active_, "data-parallel gradients: begin() twice without finish()");
  share_ = share;
  active_ = true;
  next_start_ = 0;
  timing_ = {};
  std::fill(copied_.begin(), copied_.end(), false);
  for (Bucket& b : buckets_) {
    b.missing = static_cast<int64_t>(b.params.size());
    b.pending.reset();
    b.started = false;
  }
  if (options_.overlap)
    set_gradient_ready_hook([this](AutogradMeta& leaf) {
      auto it = index_.find(&leaf);
      if (it != index_.end()) on_ready(it->second);
    });
}

void GradientReducer::copy_in(size_t k) {
  if (copied_[k]) return;
  copied_[k] = true;
  Bucket& b = buckets_[bucket_of_[k]];
  Backend& on = backend_of(b.flat);
  const DeviceScope device(b.flat.device());
  const TagScope tag(MemTag::Gradient);
  const int64_t n = params_[k].numel();
  const Tensor& g = params_[k].grad();
  // (n) share * grad, or zeros for a parameter no gradient reached, copied into the bucket
  const Tensor scaled = g.defined() ? on.scale(g.to_plain(), share_) : Tensor::zeros(Shape{n});
  on.copy_range(scaled, 0, b.flat, offset_of_[k], n);
  --b.missing;
}

void GradientReducer::start_ready_buckets() {
  while (next_start_ < buckets_.size() && buckets_[next_start_].missing == 0) {
    Bucket& b = buckets_[next_start_];
    b.pending = comm_.start_all_reduce_sum(b.flat.device_data<float>(), b.flat.numel(),
                                           "gradient bucket " + std::to_string(next_start_));
    b.started = true;
    ++next_start_;
  }
}

void GradientReducer::on_ready(size_t k) {
  copy_in(k);
  const size_t before = next_start_;
  start_ready_buckets();
  timing_.started_in_backward += static_cast<int64_t>(next_start_ - before);
  for (size_t i = before; i < next_start_; ++i) timing_.bytes_started_in_backward += buckets_[i].flat.numel() * 4;
  // Reductions move only inside MPI calls; but each call may yield the processor (Open MPI does
  // when oversubscribed), so at most one every kProgressInterval.
  constexpr auto kProgressInterval = std::chrono::microseconds(2000);
  const auto now = std::chrono::steady_clock::now();
  if (next_start_ > 0 && now - last_progress_ >= kProgressInterval) {
    comm_.progress();
    last_progress_ = now;
  }
}

void GradientReducer::finish() {
  PACKRAT_CHECK(active_, "data-parallel gradients: finish() without begin()");
  set_gradient_ready_hook(nullptr);
  active_ = false;
  for (size_t i = 0; i < next_start_; ++i)  // the backward has ended: which reductions are done?
    if (buckets_[i].pending->test()) timing_.bytes_completed_in_backward += buckets_[i].flat.numel() * 4;
  const auto start = std::chrono::steady_clock::now();
  for (size_t k = 0; k < params_.size(); ++k) copy_in(k);  // those the hook did not see
  start_ready_buckets();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    b.pending->wait();
    b.pending.reset();
    for (size_t j = 0; j < b.params.size(); ++j) {
      Tensor& p = params_[b.params[j]];
      Tensor& g = p.autograd_meta()->grad;
      if (!g.defined()) continue;
      if (g.layout() != Layout::Plain) {
        TagScope tag(MemTag::Gradient);
        g = Tensor::empty(p.shape(), DType::f32, Layout::Plain, MemTag::Gradient, p.device());
      }
      backend_of(b.flat).copy_range(b.flat, b.offset[j], g, 0, p.numel());
      g.bump_version();
    }
    timing_.bytes += b.flat.numel() * 4;
  }
  timing_.buckets = static_cast<int64_t>(buckets_.size());
  timing_.exposed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double GradientReducer::time_reduction_alone() {
  PACKRAT_CHECK(!active_, "data-parallel gradients: time_reduction_alone() inside a step");
  comm_.barrier("reduction timing");
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < buckets_.size(); ++i)
    buckets_[i].pending = comm_.start_all_reduce_sum(buckets_[i].flat.device_data<float>(), buckets_[i].flat.numel(),
                                                     "timed bucket " + std::to_string(i));
  for (Bucket& b : buckets_) {
    b.pending->wait();
    b.pending.reset();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void GradientReducer::abandon() {
  set_gradient_ready_hook(nullptr);
  active_ = false;
}

}  // namespace packrat::dist
