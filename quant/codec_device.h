#pragma once
// Which kernel runs a compression codec: the device of the tensor it is handed. The CPU kernels
// live in quant/*_cpu.cpp; the CUDA kernels come with issue 11 (quant/*_cuda.cu, over the same
// PACKRAT_HD per-element headers). Until then a codec handed a tensor on another device throws
// a clear error: it never copies the tensor to the host behind the caller's back.
#include <string_view>

#include "core/device.h"

namespace packrat {

// Returns when d is the CPU; otherwise throws packrat::Error
// "<codec>: CUDA compression kernels are not built yet (issue 11), so nothing is compressed on
// cuda:0: <what>".
void check_codec_device(std::string_view codec, Device d, std::string_view what);

}  // namespace packrat
