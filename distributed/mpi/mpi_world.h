#pragma once
// The MPI communicator's factory (distributed/mpi/, built when MPI is found).
#include <memory>

#include "distributed/communicator.h"

namespace packrat::dist {

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_s);

}  // namespace packrat::dist
