#pragma once
// The CPU's codec kernels as a table (quant/codec/codec_kernels.h): the CPU kernels of this folder
// on host tensors.
#include "quant/codec/codec_kernels.h"

namespace packrat {

CodecKernels& cpu_codecs();

}  // namespace packrat
