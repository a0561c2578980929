// The CUDA copy engine: copies on two non-blocking streams, ordered after the compute stream (the
// legacy default stream) by an event recorded there, and after each other by the copies' own
// events; the same pattern as the NCCL communicator's reductions (distributed/nccl/).
#include "core/cuda/cuda_copy_engine.h"

#include <utility>

#include "core/cuda/cuda_memory.h"
#include "core/cuda/device_guard.h"
#include "core/error.h"

namespace packrat::cuda {

namespace {

const char* way(CopyDirection d) { return d == CopyDirection::ToHost ? "to the host" : "to the device"; }

}  // namespace

CudaCopyEngine::CudaCopyEngine(int index) : index_(index) {
  auto pinned = std::make_unique<PinnedWithFallback>(std::make_unique<PinnedHostMemory>(),
                                                     fmt::format("cuda:{}'s host pool", index));
  pinned_ = pinned.get();
  host_pool_ = std::make_unique<Allocator>(Device::cpu(), std::move(pinned));
  DeviceGuard on(index_);
  cudaError_t s = cudaStreamCreateWithFlags(&to_host_, cudaStreamNonBlocking);
  if (s == cudaSuccess) s = cudaStreamCreateWithFlags(&to_device_, cudaStreamNonBlocking);
  if (s == cudaSuccess) s = cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming);
  if (s != cudaSuccess) {
    if (to_host_) cudaStreamDestroy(to_host_);
    if (to_device_) cudaStreamDestroy(to_device_);
    fail("cuda:{}'s copy engine: creating its streams failed: {}", index_, cudaGetErrorString(s));
  }
}

CudaCopyEngine::~CudaCopyEngine() {
  // No DeviceGuard: its constructor may throw.
  int previous = 0;
  cudaGetDevice(&previous);
  if (previous != index_) cudaSetDevice(index_);
  // The copies still queued read or write buffers whose owners are going: let them finish first.
  cudaStreamSynchronize(to_host_);
  cudaStreamSynchronize(to_device_);
  for (auto& [id, c] : live_) {
    cudaEventDestroy(c.start);
    cudaEventDestroy(c.end);
  }
  for (Copy& c : retiring_) {
    cudaEventDestroy(c.start);
    cudaEventDestroy(c.end);
  }
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  cudaEventDestroy(compute_ready_);
  cudaStreamDestroy(to_host_);
  cudaStreamDestroy(to_device_);
  cudaGetLastError();  // a destructor reports nothing
  if (previous != index_) cudaSetDevice(previous);
}

CopyEvent CudaCopyEngine::copy(CopyDirection d, const Tensor& src, Tensor& dst, CopyEvent after,
                               const std::string& what) {
  const Device gpu = Device::cuda(index_);
  const bool to_host = d == CopyDirection::ToHost;
  PACKRAT_CHECK(src.defined() && dst.defined(), "{}: copy {} on {}: the {} is undefined", what, way(d), gpu.str(),
                src.defined() ? "destination" : "source");
  PACKRAT_CHECK(src.nbytes() == dst.nbytes(), "{}: copy {} on {}: {} ({} bytes) into {} ({} bytes)", what, way(d),
                gpu.str(), src.describe(), src.nbytes(), dst.describe(), dst.nbytes());
  const Tensor& on_gpu = to_host ? src : dst;
  const Tensor& on_host = to_host ? dst : src;
  PACKRAT_CHECK(on_gpu.device() == gpu, "{}: copy {} on {}: the {} is on {}, not {}", what, way(d), gpu.str(),
                to_host ? "source" : "destination", on_gpu.device().str(), gpu.str());
  PACKRAT_CHECK(on_host.is_cpu(), "{}: copy {} on {}: the {} is on {}, not in host memory", what, way(d), gpu.str(),
                to_host ? "destination" : "source", on_host.device().str());

  DeviceGuard on(index_);
  std::lock_guard lock(mutex_);
  recycle_retiring();
  const cudaEvent_t other = after != 0 ? find(after, "copy() after").end : nullptr;
  Copy c;
  c.direction = d;
  c.bytes = static_cast<int64_t>(src.nbytes());
  c.what = what;
  const cudaStream_t st = stream(d);
  // The copy starts after every kernel queued on the compute stream so far (the writer of src,
  // the last reader of dst's block), then after `after`; start and end time it.
  cudaError_t s = take_event(&c.start);
  if (s == cudaSuccess) s = take_event(&c.end);
  if (s == cudaSuccess) s = cudaEventRecord(compute_ready_, cudaStreamLegacy);
  if (s == cudaSuccess) s = cudaStreamWaitEvent(st, compute_ready_, 0);
  if (s == cudaSuccess && other) s = cudaStreamWaitEvent(st, other, 0);
  if (s == cudaSuccess) s = cudaEventRecord(c.start, st);
  if (s == cudaSuccess && c.bytes > 0)
    s = cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                        st);
  if (s == cudaSuccess) s = cudaEventRecord(c.end, st);
  if (s != cudaSuccess) {
    cudaGetLastError();
    for (cudaEvent_t e : {c.start, c.end})
      if (e) free_events_.push_back(e);  // nothing will ask about this copy
    fail_copy(what, d, s);
  }
  const CopyEvent id = next_id_++;
  live_.emplace(id, std::move(c));
  return id;
}

bool CudaCopyEngine::done(CopyEvent e) {
  DeviceGuard on(index_);
  std::lock_guard lock(mutex_);
  return settle(find(e, "done()"));
}

void CudaCopyEngine::host_wait(CopyEvent e) {
  DeviceGuard on(index_);
  cudaEvent_t end = nullptr;
  CopyDirection d = CopyDirection::ToHost;
  std::string what;
  {
    std::lock_guard lock(mutex_);
    Copy& c = find(e, "host_wait()");
    if (settle(c)) return;
    end = c.end;
    d = c.direction;
    what = c.what;
  }
  // Outside the lock: other threads queue and poll copies meanwhile. The event stays ours until
  // forget(e), which the caller does not call while it waits.
  const cudaError_t s = cudaEventSynchronize(end);
  if (s != cudaSuccess) fail_copy(what, d, s);
}

void CudaCopyEngine::compute_wait(CopyEvent e) {
  DeviceGuard on(index_);
  std::lock_guard lock(mutex_);
  Copy& c = find(e, "compute_wait()");
  if (settle(c)) return;  // already complete (a failed copy throws here): nothing to wait for
  const cudaError_t s = cudaStreamWaitEvent(cudaStreamLegacy, c.end, 0);
  if (s != cudaSuccess) fail_copy(c.what, c.direction, s);
}

void CudaCopyEngine::forget(CopyEvent e) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(e);
  if (it == live_.end()) find(e, "forget()");  // throws, naming it
  Copy& c = it->second;
  if (c.counted) {
    free_events_.push_back(c.start);
    free_events_.push_back(c.end);
  } else {
    retiring_.push_back(std::move(c));  // maybe still running: its events wait for it (recycle_retiring)
  }
  live_.erase(it);
}

CopyTimes CudaCopyEngine::take_times() {
  DeviceGuard on(index_);
  std::lock_guard lock(mutex_);
  recycle_retiring();
  for (auto& [id, c] : live_) settle(c);
  return std::exchange(times_, CopyTimes{});
}

CudaCopyEngine::Copy& CudaCopyEngine::find(CopyEvent e, const char* call) {
  auto it = live_.find(e);
  if (it != live_.end()) return it->second;
  if (e == 0) fail("cuda:{}'s copy engine: {} copy event 0, which names no copy", index_, call);
  fail("cuda:{}'s copy engine: {} copy event {}, which is {}", index_, call, e,
       e < next_id_ ? "forgotten (forget() was called for it)" : "unknown (no copy() returned it)");
}

bool CudaCopyEngine::settle(Copy& c) {
  if (c.counted) return true;
  const cudaError_t s = cudaEventQuery(c.end);
  if (s == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: the copy is still queued; leave no status behind
    return false;
  }
  if (s != cudaSuccess) fail_copy(c.what, c.direction, s);
  float ms = 0;
  if (cudaEventElapsedTime(&ms, c.start, c.end) != cudaSuccess) {
    cudaGetLastError();  // unmeasured: the copy itself is fine
    ms = 0;
  }
  ++times_.copies;
  (c.direction == CopyDirection::ToHost ? times_.bytes_to_host : times_.bytes_to_device) += c.bytes;
  times_.busy_s += ms / 1e3;
  c.counted = true;
  return true;
}

void CudaCopyEngine::recycle_retiring() {
  for (size_t i = 0; i < retiring_.size();) {
    bool complete = false;
    try {
      complete = settle(retiring_[i]);
    } catch (const Error&) {
      // A forgotten copy failed: reported once, here, and dropped (its events are not reused).
      cudaEventDestroy(retiring_[i].start);
      cudaEventDestroy(retiring_[i].end);
      retiring_.erase(retiring_.begin() + static_cast<std::ptrdiff_t>(i));
      throw;
    }
    if (!complete) {
      ++i;
      continue;
    }
    free_events_.push_back(retiring_[i].start);
    free_events_.push_back(retiring_[i].end);
    retiring_[i] = std::move(retiring_.back());
    retiring_.pop_back();
  }
}

cudaError_t CudaCopyEngine::take_event(cudaEvent_t* e) {
  if (free_events_.empty()) return cudaEventCreate(e);  // default flags: timed (take_times)
  *e = free_events_.back();
  free_events_.pop_back();
  return cudaSuccess;
}

void CudaCopyEngine::fail_copy(const std::string& what, CopyDirection d, cudaError_t status) const {
  fail("{}: copy {} on cuda:{} failed: {}", what, way(d), index_, cudaGetErrorString(status));
}

}  // namespace packrat::cuda
