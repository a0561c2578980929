// CpuBackend: convolution on oneDNN (core/cpu/conv.h), weights through the weight cache.
#include "core/cpu/conv.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/dnnl_context.h"

namespace packrat::cpu {

Tensor CpuBackend::conv_input(const Tensor& x, const ConvGeometry& g) { return cpu::to_layout(x, conv_layouts(g).src); }

Tensor CpuBackend::conv_grad_output(const Tensor& gy, const ConvGeometry& g) { return cpu::conv_grad_output(gy, g); }

Tensor CpuBackend::conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g,
                                bool keep_weights) {
  return cpu::conv_forward(x, w, b, g, keep_weights);
}

Tensor CpuBackend::conv_backward_data(const Tensor& gy, const Tensor& w, const ConvGeometry& g) {
  return cpu::conv_backward_data(gy, w, g);
}

void CpuBackend::conv_backward_weights(const Tensor& x, const Tensor& gy, const ConvGeometry& g, Tensor& gw,
                                       Tensor& gb) {
  cpu::conv_backward_weights(x, gy, g, gw, gb);
}

DType CpuBackend::conv_weight_gradient_dtype(const ConvGeometry& g) { return cpu::weight_gradient_dtype(g); }

}  // namespace packrat::cpu
