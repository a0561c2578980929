// cuDNN convolution plans (conv_plans.h).
#include "core/cuda/conv_plans.h"

#include <array>
#include <climits>
#include <cstdint>
#include <unordered_map>

#include "core/autocast.h"
#include "core/cuda/dnn_check.h"
#include "core/cuda/dnn_handles.h"

namespace packrat::cuda {

namespace {

int as_int(int64_t v, const char* name, const std::string& what) {
  PACKRAT_CHECK(v >= 0 && v <= INT_MAX, "{}: {} = {} does not fit cuDNN's int dimensions", what, name, v);
  return static_cast<int>(v);
}

// Results that need the descriptor's math type changed to run on tensor cores; never taken (with
// tf32_use().convolutions the DEFAULT descriptor already permits TF32).
bool tensor_core_math(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// cuDNN's data type for a convolution's x, y and w in `dtype` (the sums are f32 in every case).
cudnnDataType_t cudnn_dtype(DType dtype, const std::string& what) {
  switch (dtype) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f16: return CUDNN_DATA_HALF;
    default: fail("{}: cuDNN convolutions take f32, bf16 or f16, not {}", what, dtype_name(dtype));
  }
}

// The chosen entry of cuDNN's ranked results (see ConvChoice): the first supported FMA-math one
// (any one for 16-bit operands),
// or with `direct` the supported one with the smallest workspace (the first on ties); with
// `deterministic` only those cuDNN marks deterministic count.
template <typename Perf>
int pick(const Perf* results, int count, bool direct, bool deterministic, bool half, const std::string& what,
         const char* direction) {
  int best = -1;
  for (int i = 0; i < count; ++i) {
    const Perf& p = results[i];
    // 16-bit operands: tensor-core algorithms are the point (the descriptor permits them).
    if (p.status != CUDNN_STATUS_SUCCESS || (!half && tensor_core_math(p.mathType))) continue;
    if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    if (best < 0 || (direct && p.memory < results[best].memory)) best = i;
    if (!direct) break;
  }
  if (best < 0)
    fail("{}: cuDNN's heuristics offer no {}{} algorithm (of {} ranked)", what, deterministic ? "deterministic " : "",
         direction, count);
  return results[best].algo;
}

}  // namespace

ConvPlan::ConvPlan(int device, const ConvGeometry& g, Layout layout)
    : what_(fmt::format("conv2d on cuda:{}, geometry {}, {}", device, g.key(), layout_name(layout))),
      direct_(conv_algorithm_setting() == ConvAlgorithm::Direct),
      deterministic_(conv_algorithm_setting() == ConvAlgorithm::Deterministic),
      half_(g.dtype != DType::f32) {
  const cudnnDataType_t dtype = cudnn_dtype(g.dtype, what_);
  const int N = as_int(g.N, "N", what_), Cin = as_int(g.Cin, "Cin", what_), H = as_int(g.H, "H", what_),
            W = as_int(g.W, "W", what_), Cout = as_int(g.Cout, "Cout", what_), OH = as_int(g.OH, "OH", what_),
            OW = as_int(g.OW, "OW", what_);
  PACKRAT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x), what_);
  PACKRAT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y), what_);
  PACKRAT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w), what_);
  PACKRAT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv), what_);
  // Every operand in one format: NHWC (the filter then KRSC) lets cuDNN's tensor-core kernels
  // read and write in place; NCHW makes them transpose around every call.
  PACKRAT_CHECK(layout == Layout::Plain || layout == Layout::NHWC, "{}: cuDNN plans are plain or NHWC", what_);
  const cudnnTensorFormat_t format = layout == Layout::NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  PACKRAT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, format, dtype, N, Cin, H, W), what_);
  PACKRAT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, format, dtype, N, Cout, OH, OW), what_);
  PACKRAT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, dtype, format, Cout,
                                                 as_int(g.Cin / g.groups, "Cin/groups", what_),
                                                 as_int(g.KH, "KH", what_), as_int(g.KW, "KW", what_)),
                      what_);
  PACKRAT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
                          conv, as_int(g.pad_h, "pad_h", what_), as_int(g.pad_w, "pad_w", what_),
                          as_int(g.stride_h, "stride_h", what_), as_int(g.stride_w, "stride_w", what_),
                          as_int(g.dilation_h, "dilation_h", what_), as_int(g.dilation_w, "dilation_w", what_),
                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                      what_);
  PACKRAT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, as_int(g.groups, "groups", what_)), what_);
  // FMA, not DEFAULT: on Ampere and later CUDNN_DEFAULT_MATH lets f32 convolutions run on TF32
  // tensor cores (10-bit mantissa); the backend test compares with the CPU at f32 tolerance.
  // tf32_use().convolutions (`precision`, or PACKRAT_CUDA_TF32=1) gives DEFAULT, PyTorch's default.
  // 16-bit operands: TENSOR_OP, their tensor cores.
  const cudnnMathType_t math =
      half_ ? CUDNN_TENSOR_OP_MATH : tf32_use().convolutions ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  PACKRAT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math), what_);
  int n = 0, c = 0, h = 0, wd = 0;
  PACKRAT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &h, &wd), what_);
  PACKRAT_CHECK(n == N && c == Cout && h == OH && wd == OW, "{}: cuDNN computes an output of ({}, {}, {}, {})", what_,
                n, c, h, wd);
}

ConvPlan::~ConvPlan() {
  if (conv) cudnnDestroyConvolutionDescriptor(conv);
  if (w) cudnnDestroyFilterDescriptor(w);
  if (y) cudnnDestroyTensorDescriptor(y);
  if (x) cudnnDestroyTensorDescriptor(x);
}

const ConvChoice& ConvPlan::forward(cudnnHandle_t h) {
  std::call_once(forward_once_, [&] {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    PACKRAT_CUDNN_CHECK(
        cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
        what_);
    const auto algo =
        static_cast<cudnnConvolutionFwdAlgo_t>(pick(perf, count, direct_, deterministic_, half_, what_, "forward"));
    size_t bytes = 0;
    PACKRAT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, algo, &bytes),
                        fmt::format("{}, forward algorithm {}", what_, static_cast<int>(algo)));
    forward_ = {static_cast<int>(algo), bytes};
  });
  return forward_;
}

const ConvChoice& ConvPlan::backward_data(cudnnHandle_t h) {
  std::call_once(backward_data_once_, [&] {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    PACKRAT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w, y, conv, x,
                                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
                        what_);
    const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(
        pick(perf, count, direct_, deterministic_, half_, what_, "backward-data"));
    size_t bytes = 0;
    PACKRAT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, w, y, conv, x, algo, &bytes),
                        fmt::format("{}, backward-data algorithm {}", what_, static_cast<int>(algo)));
    backward_data_ = {static_cast<int>(algo), bytes};
  });
  return backward_data_;
}

const ConvChoice& ConvPlan::backward_filter(cudnnHandle_t h) {
  std::call_once(backward_filter_once_, [&] {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int count = 0;
    PACKRAT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                            h, x, y, conv, w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf),
                        what_);
    const auto algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(
        pick(perf, count, direct_, deterministic_, half_, what_, "backward-filter"));
    size_t bytes = 0;
    PACKRAT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, conv, w, algo, &bytes),
                        fmt::format("{}, backward-filter algorithm {}", what_, static_cast<int>(algo)));
    backward_filter_ = {static_cast<int>(algo), bytes};
  });
  return backward_filter_;
}

namespace {
// What a plan is cached by: the device, the geometry, the layout, the algorithm setting, whether
// TF32 is allowed (the descriptor's math type: without it a plan made under one setting served the
// other) and the operands' dtype, as integers (a formatted string key cost about a microsecond of
// host time per call, three calls a convolution and step).
using PlanKey = std::array<int64_t, 22>;
PlanKey plan_key(int device, const ConvGeometry& g, Layout layout) {
  return {device,       g.N,          g.Cin,        g.H,          g.W,          g.Cout,     g.KH,
          g.KW,         g.OH,         g.OW,         g.stride_h,   g.stride_w,   g.pad_h,    g.pad_w,
          g.dilation_h, g.dilation_w, g.groups,     g.has_bias,   static_cast<int64_t>(layout),
          static_cast<int64_t>(conv_algorithm_setting()),      tf32_use().convolutions,
          static_cast<int64_t>(g.dtype)};
}
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the values
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};
}  // namespace

std::shared_ptr<ConvPlan> conv_plan(int device, const ConvGeometry& g, Layout layout) {
  static std::mutex mutex;
  static std::unordered_map<PlanKey, std::shared_ptr<ConvPlan>, PlanKeyHash> plans;
  const PlanKey key = plan_key(device, g, layout);
  std::lock_guard lock(mutex);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  if (plans.size() >= 512) plans.clear();  // bounded: a model has far fewer distinct convolutions
  auto plan = std::make_shared<ConvPlan>(device, g, layout);
  plans.emplace(key, plan);
  return plan;
}

}  // namespace packrat::cuda
