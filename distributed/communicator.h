#pragma once
// The processes of a data-parallel run and the collectives they need, on an engine the field
// already trusts: MPI for CPU processes, NCCL for buffers in GPU memory (distributed/nccl/: an
// MPI world starts it and carries everything on the host).
//
//   auto world = make_communicator({.backend = "mpi", .timeout_s = 60});
//   world->all_reduce_sum(grads.data(), grads.size(), "gradients");   // in place, every rank
//
// Every collective is called in the same order on every rank. None waits forever: a collective
// not complete within timeout_s throws CommunicatorError naming the rank(s) that did not arrive
// (dead, hung, or in another collective) and the operation, so a run whose peer died stops with
// a message instead of hanging.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace packrat::dist {

// A collective failed or timed out; what() names the rank(s) and the operation.
class CommunicatorError : public Error {
 public:
  using Error::Error;
};

// A started all-reduce (Communicator::start_all_reduce_sum); the buffer must stay alive and
// untouched until wait() returns.
class PendingReduce {
 public:
  virtual ~PendingReduce() = default;
  virtual bool test() = 0;  // true when complete (drives MPI's progress engine)
  virtual void wait() = 0;  // until complete or the timeout (throws CommunicatorError)
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;  // among the ranks on this host
  virtual int local_size() const = 0;
  virtual std::string_view backend_name() const = 0;  // "mpi (Open MPI 4.1.4)"
  virtual double timeout_s() const = 0;

  // data[i] = sum over ranks of data[i], on every rank. `what` names the call in errors. data is
  // host memory, or GPU memory with the NCCL communicator (which sends host memory to MPI).
  virtual void all_reduce_sum(float* data, int64_t count, std::string_view what) = 0;
  virtual void all_reduce_sum(double* data, int64_t count, std::string_view what) = 0;
  // Nonblocking: starts the sum; the result is in `data` once wait() returns.
  virtual std::unique_ptr<PendingReduce> start_all_reduce_sum(float* data, int64_t count, std::string what) = 0;
  // Makes the progress engine move the started reductions along (MPI progresses nonblocking
  // collectives only inside MPI calls); cheap, called from the backward pass.
  virtual void progress() = 0;
  // `bytes` bytes at data from `root` to every rank.
  virtual void broadcast(void* data, int64_t bytes, int root, std::string_view what) = 0;
  // Every rank's string, in rank order, on `root` (other ranks get an empty vector).
  virtual std::vector<std::string> gather(const std::string& mine, int root, std::string_view what) = 0;
  virtual void barrier(std::string_view what) = 0;
  // This rank is ending on an error: it will not finalize the world (MPI_Finalize could wait for a
  // dead peer forever); the launcher ends the others.
  virtual void mark_failed() = 0;
};

// A string broadcast from root (its length first).
std::string broadcast_string(Communicator& c, std::string s, int root, std::string_view what);

// Whether this process was started by mpirun/mpiexec (Open MPI, MPICH, PMIx or Slurm PMI variables).
bool launched_by_mpi_launcher();

struct CommunicatorOptions {
  std::string backend = "auto";  // mpi | nccl | auto (auto: nccl for CUDA tensors, mpi otherwise)
  bool cuda_tensors = false;     // the training tensors live on a CUDA device (for auto)
  int cuda_device = -1;          // nccl: this rank's GPU; -1 = its index among the ranks on its host
  double timeout_s = 300;        // per collective
};
// The backend the options ask for, with the reason when it cannot be had ("built without NCCL").
std::string resolve_backend(const CommunicatorOptions& o);
// Initialises the world (MPI_Init on first use). Throws Error when this build has no MPI
// ("built without MPI") or no NCCL, naming the key distributed.backend.
std::unique_ptr<Communicator> make_communicator(const CommunicatorOptions& o);

// Built-in capabilities of this binary.
bool built_with_mpi();
bool built_with_nccl();

}  // namespace packrat::dist
