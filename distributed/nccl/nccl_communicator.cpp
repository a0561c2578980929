// The NCCL communicator: all-reduces of GPU buffers run in NCCL on a stream of their own, after
// the work already queued on the default stream (an event orders them), and the default stream
// waits for them in turn, so a bucket's reduction overlaps the rest of the backward pass. Anything
// in host memory (metrics, broadcasts of configs and checkpoints, gathers, barriers) goes to the
// MPI communicator that started the world. The only file that includes nccl.h.
//
// Timeouts: a reduction's completion is polled with a deadline. When it passes, the NCCL
// communicator is aborted (its kernels would otherwise wait for the missing peer forever) and
// the ranks meet in an MPI barrier, whose own timeout names the rank(s) that did not come (MPI
// can say who is missing; NCCL cannot). A dead peer is therefore named after at most twice
// distributed.timeout_s.
#include <cuda_runtime.h>
#include <nccl.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "distributed/mpi/mpi_world.h"
#include "distributed/nccl/nccl_world.h"

namespace packrat::dist {

namespace {

using Clock = std::chrono::steady_clock;

bool is_device_pointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // a plain host pointer on older runtimes
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

class NcclCommunicator;

class NcclPendingReduce : public PendingReduce {
 public:
  NcclPendingReduce(NcclCommunicator& c, cudaEvent_t done, std::string what) : comm_(c), done_(done), what_(std::move(what)) {}
  ~NcclPendingReduce() override { cudaEventDestroy(done_); }
  bool test() override;
  void wait() override;

 private:
  NcclCommunicator& comm_;
  cudaEvent_t done_;
  std::string what_;
  bool finished_ = false;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(double timeout_s, int cuda_device) : host_(make_mpi_communicator(timeout_s)) {
    int gpus = 0;
    check_cuda(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
    device_ = cuda_device >= 0 ? cuda_device : host_->local_rank();
    PACKRAT_CHECK(device_ < gpus,
                  "distributed.backend: nccl: rank {} needs GPU {} (its {} among the {} ranks on this host), but {} GPU(s) "
                  "are visible: NCCL needs one GPU per rank",
                  host_->rank(), device_, cuda_device >= 0 ? "device setting" : "index", host_->local_size(), gpus);
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id{};
    if (host_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    host_->broadcast(&id, sizeof id, 0, "NCCL unique id");
    check_nccl(ncclCommInitRank(&comm_, host_->size(), id, host_->rank()), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    int version = 0;
    ncclGetVersion(&version);
    name_ = fmt::format("nccl {}.{}.{} on cuda:{}, over {}", version / 10000, version / 100 % 100, version % 100,
                        device_, host_->backend_name());
  }

  ~NcclCommunicator() override {
    if (failed_) return;  // aborted already, or a peer may be gone: no collective teardown
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  int local_rank() const override { return host_->local_rank(); }
  int local_size() const override { return host_->local_size(); }
  std::string_view backend_name() const override { return name_; }
  double timeout_s() const override { return host_->timeout_s(); }

  void all_reduce_sum(float* data, int64_t count, std::string_view what) override {
    if (!is_device_pointer(data)) return host_->all_reduce_sum(data, count, what);
    start(data, count, ncclFloat, std::string(what))->wait();
  }
  void all_reduce_sum(double* data, int64_t count, std::string_view what) override {
    if (!is_device_pointer(data)) return host_->all_reduce_sum(data, count, what);
    start(data, count, ncclDouble, std::string(what))->wait();
  }
  std::unique_ptr<PendingReduce> start_all_reduce_sum(float* data, int64_t count, std::string what) override {
    if (!is_device_pointer(data)) return host_->start_all_reduce_sum(data, count, std::move(what));
    return start(data, count, ncclFloat, std::move(what));
  }
  void progress() override { host_->progress(); }  // NCCL progresses on its own
  void broadcast(void* data, int64_t bytes, int root, std::string_view what) override {
    host_->broadcast(data, bytes, root, what);
  }
  std::vector<std::string> gather(const std::string& mine, int root, std::string_view what) override {
    return host_->gather(mine, root, what);
  }
  void barrier(std::string_view what) override { host_->barrier(what); }
  void mark_failed() override {
    failed_ = true;
    host_->mark_failed();
  }

  // Polls `done` until it has happened; then the default stream waits for it (the reduced
  // bucket is read by later work there). On the deadline: abort, find the missing rank, throw.
  void wait(cudaEvent_t done, std::string_view what) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s());
    int polls = 0;
    for (;;) {
      const cudaError_t q = cudaEventQuery(done);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) fail(fmt::format("{} failed on the GPU: {}", what, cudaGetErrorString(q)));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        fail(fmt::format("{} failed in NCCL: {} (a peer rank died?)", what, ncclGetErrorString(async)));
      if (Clock::now() > deadline) fail_timed_out(what);
      if (++polls > 200) std::this_thread::sleep_for(std::chrono::microseconds(polls > 2000 ? 500 : 50));
    }
    check_cuda(cudaStreamWaitEvent(cudaStreamLegacy, done, 0), "cudaStreamWaitEvent");
  }

 private:
  std::unique_ptr<PendingReduce> start(void* data, int64_t count, ncclDataType_t type, std::string what) {
    // The bucket was written by kernels on the default stream: NCCL's stream starts after them.
    cudaEvent_t ready = nullptr, done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(ready, cudaStreamLegacy), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);  // released once recorded work completes
    const ncclResult_t r = ncclAllReduce(data, data, static_cast<size_t>(count), type, ncclSum, comm_, stream_);
    if (r != ncclSuccess) fail(fmt::format("{}: ncclAllReduce: {}", what, ncclGetErrorString(r)));
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(done, stream_), "cudaEventRecord");
    return std::make_unique<NcclPendingReduce>(*this, done, std::move(what));
  }

  [[noreturn]] void fail_timed_out(std::string_view what) {
    failed_ = true;
    ncclCommAbort(comm_);
    spdlog::error("rank {}: {} did not complete in NCCL within distributed.timeout_s = {:g} s; asking the ranks over MPI "
                  "which one is missing",
                  rank(), what, timeout_s());
    host_->barrier(fmt::format("{} (after NCCL timed out)", what));  // names the missing rank when there is one
    throw CommunicatorError(fmt::format("rank {}: {} did not complete in NCCL within distributed.timeout_s = {:g} s, but "
                                        "every rank reached the MPI barrier after it (NCCL's network is stuck)",
                                        rank(), what, timeout_s()));
  }

  [[noreturn]] void fail(const std::string& message) {
    failed_ = true;
    host_->mark_failed();
    ncclCommAbort(comm_);
    throw CommunicatorError(fmt::format("rank {}: {}", rank(), message));
  }

  void check_cuda(cudaError_t status, const char* call) {
    if (status != cudaSuccess) throw CommunicatorError(fmt::format("rank {}: {}: {}", host_->rank(), call, cudaGetErrorString(status)));
  }
  void check_nccl(ncclResult_t status, const char* call) {
    if (status != ncclSuccess) {
      host_->mark_failed();
      throw CommunicatorError(fmt::format("rank {}: {}: {}", host_->rank(), call, ncclGetErrorString(status)));
    }
  }

  std::unique_ptr<Communicator> host_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
  bool failed_ = false;
  std::string name_;
};

bool NcclPendingReduce::test() {
  if (!finished_ && cudaEventQuery(done_) == cudaSuccess) wait();
  return finished_;
}

void NcclPendingReduce::wait() {
  if (finished_) return;
  comm_.wait(done_, what_);
  finished_ = true;
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(double timeout_s, int cuda_device) {
  return std::make_unique<NcclCommunicator>(timeout_s, cuda_device);
}

}  // namespace packrat::dist
