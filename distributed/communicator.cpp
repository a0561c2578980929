#include "distributed/communicator.h"

#include <cstdlib>

#include "core/build_config.h"
#if PACKRAT_HAVE_MPI
#include "distributed/mpi/mpi_world.h"
#endif
#if PACKRAT_HAVE_NCCL
#include "distributed/nccl/nccl_world.h"
#endif

namespace packrat::dist {

bool built_with_mpi() { return PACKRAT_HAVE_MPI != 0; }
bool built_with_nccl() { return PACKRAT_HAVE_NCCL != 0; }  // CMake builds NCCL only with MPI

bool launched_by_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

std::string resolve_backend(const CommunicatorOptions& o) {
  std::string b = o.backend;
  if (b == "auto") b = o.cuda_tensors ? "nccl" : "mpi";
  if (b == "nccl") {
    PACKRAT_CHECK(built_with_nccl(), "distributed.backend: nccl{}: this packrat was built without NCCL (it needs the "
                  "CUDA backend, MPI, and the toolkit's nccl.h and libnccl); use device: cpu with distributed.backend: mpi",
                  o.backend == "auto" ? " (auto, for CUDA tensors)" : "");
    PACKRAT_CHECK(o.cuda_tensors, "distributed.backend: nccl reduces GPU tensors, but the run's device is the CPU; use "
                  "distributed.backend: mpi (or auto)");
    return b;
  }
  PACKRAT_CHECK(b == "mpi", "distributed.backend: '{}' is unknown (mpi, nccl, auto)", o.backend);
  PACKRAT_CHECK(!o.cuda_tensors, "distributed.backend: mpi reduces host memory, but the run's device is a GPU; use "
                "distributed.backend: nccl (or auto)");
  PACKRAT_CHECK(built_with_mpi(), "distributed.backend: mpi: this packrat was built without MPI (install libopenmpi-dev "
                "and openmpi-bin, then configure with -DPACKRAT_MPI=ON)");
  return b;
}

std::unique_ptr<Communicator> make_communicator(const CommunicatorOptions& o) {
  PACKRAT_CHECK(o.timeout_s > 0, "distributed.timeout_s must be positive, got {}", o.timeout_s);
  const std::string backend = resolve_backend(o);
#if PACKRAT_HAVE_NCCL
  if (backend == "nccl") return make_nccl_communicator(o.timeout_s, o.cuda_device);
#endif
#if PACKRAT_HAVE_MPI
  return make_mpi_communicator(o.timeout_s);
#else
  fail("distributed: built without MPI");
#endif
}

std::string broadcast_string(Communicator& c, std::string s, int root, std::string_view what) {
  int64_t n = static_cast<int64_t>(s.size());
  c.broadcast(&n, sizeof n, root, what);
  s.resize(static_cast<size_t>(n));
  if (n > 0) c.broadcast(s.data(), n, root, what);
  return s;
}

}  // namespace packrat::dist
