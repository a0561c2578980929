#pragma once
// The NCCL communicator's factory (distributed/nccl/, built when NCCL and MPI are found).
#include <memory>

#include "distributed/communicator.h"

namespace packrat::dist {

// NCCL for buffers in GPU memory, over an MPI world that starts it (the unique id is broadcast
// over MPI) and carries everything on the host (broadcasts, gathers, barriers, host reductions).
// cuda_device: the GPU of this rank, or -1 for the rank's local index among the ranks on its host.
std::unique_ptr<Communicator> make_nccl_communicator(double timeout_s, int cuda_device);

}  // namespace packrat::dist
