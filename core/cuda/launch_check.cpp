#include "core/cuda/launch_check.h"

#include "core/cuda/cuda_check.h"

namespace packrat::cuda {

void check_last_launch(const char* what) { PACKRAT_CHECK_LAUNCH(what); }

}  // namespace packrat::cuda
