#pragma once
// For code outside core/cuda/ that calls a CUDA launcher (the codecs in quant/): the launch's
// error as packrat::Error naming what was launched. CUDA-free; CUDA builds only.
namespace packrat::cuda {

void check_last_launch(const char* what);

}  // namespace packrat::cuda
