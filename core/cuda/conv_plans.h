#pragma once
// cuDNN convolution plans (legacy API, f32 or 16-bit operands with f32 sums, plain NCHW or NHWC):
// the descriptors of one geometry, created once, and for each direction the algorithm chosen
// once, on first use, with its workspace size. Cached per GPU, geometry, dtype, layout,
// ConvAlgorithm setting and TF32 use. With NHWC the input, output and filter are all
// channels-innermost: x (N, H, W, Cin), y (N, OH, OW, Cout), w (Cout, KH, KW, Cin / groups).
// Included by core/cuda/*.cpp only.
#include <cudnn.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "core/backend.h"

namespace packrat::cuda {

// How the algorithms are chosen: cuDNN's heuristics (cudnnGet*Algorithm_v7), which rank the
// algorithms without running them, so the first step neither benchmarks nor allocates a search
// workspace, and the choice does not depend on timing noise. ConvAlgorithm::Auto takes the
// first (expected fastest) algorithm the heuristics support; Direct the one with the smallest
// workspace; Deterministic the first that cuDNN marks CUDNN_DETERMINISTIC (the same bits run
// after run: no split reductions in a nondeterministic order). TF32 tensor cores are not used (math type
// CUDNN_FMA_MATH; CUDNN_DEFAULT_MATH would permit TF32 on Ampere and later) unless
// tf32_use().convolutions (core/autocast.h) when the plan is made.
struct ConvChoice {
  int algo = -1;           // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t workspace = 0;    // bytes
};

class ConvPlan {
 public:
  ConvPlan(int device, const ConvGeometry& g, Layout layout);
  ~ConvPlan();
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;

  const ConvChoice& forward(cudnnHandle_t h);
  const ConvChoice& backward_data(cudnnHandle_t h);
  const ConvChoice& backward_filter(cudnnHandle_t h);
  // "conv2d geometry N,Cin,H,W,...": the context of every error about this plan.
  const std::string& what() const { return what_; }

  cudnnTensorDescriptor_t x = nullptr;  // (N, Cin, H, W)
  cudnnTensorDescriptor_t y = nullptr;  // (N, Cout, OH, OW)
  cudnnFilterDescriptor_t w = nullptr;  // (Cout, Cin / groups, KH, KW)
  cudnnConvolutionDescriptor_t conv = nullptr;

 private:
  std::string what_;
  bool direct_;
  bool deterministic_;
  bool half_;  // bf16 or f16 operands (ConvGeometry::dtype), f32 sums: tensor-core math
  ConvChoice forward_, backward_data_, backward_filter_;
  std::once_flag forward_once_, backward_data_once_, backward_filter_once_;
};

// The plan of geometry g in `layout` (Plain or NHWC) on GPU `device` (created on first use).
std::shared_ptr<ConvPlan> conv_plan(int device, const ConvGeometry& g, Layout layout);

}  // namespace packrat::cuda
