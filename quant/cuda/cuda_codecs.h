#pragma once
// The CUDA codec kernels as a table (quant/codec/codec_kernels.h; CUDA builds only).
#include "quant/codec/codec_kernels.h"

namespace packrat {

CodecKernels& cuda_codecs();

}  // namespace packrat
