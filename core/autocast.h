#pragma once
// Mixed precision: the run's `precision` and the thread's autocast scope.
//
// Under an AutocastScope(bf16) (or f16) the ops PyTorch's autocast lists as lower-precision -- convolutions,
// linear layers, matmuls and attention -- cast their floating inputs to that dtype and produce their output
// in it; parameters stay f32 (the kernels read them converted, a reorder the CPU's weight cache keeps per
// version). Every other op accepts 16-bit inputs, computes in f32 and gives its output in its input's dtype
// (batchnorm, activations, pooling, additions...), except the losses, which give f32. So activations flow in
// 16 bits, as in PyTorch's autocast, and what an op saves for backward is what it computed with: the FP32
// store's bytes under bf16 are the AMP baseline. Gradients stay f32 throughout.
//
// A backend runs a 16-bit dtype natively (Backend::computes_in: oneDNN's bf16 kernels on a CPU with
// AVX512_BF16 or AMX) or at the kernel's edges: the op converts the 16-bit operands to f32 and the kernel
// computes in f32 on those rounded values (same numbers, no speed gain).
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"
#include "core/tensor.h"

namespace packrat {

// The config's `precision`. tf32: f32 tensors, cuDNN / cuBLAS may use TF32 tensor cores.
enum class Precision : uint8_t { fp32, tf32, bf16, fp16 };
std::string_view precision_name(Precision p);
std::optional<Precision> precision_from_name(std::string_view name);
// The dtype autocast computes in under p: bf16, f16, or f32 (fp32 and tf32: autocast off).
DType precision_dtype(Precision p);

// The thread's autocast dtype: f32 when off.
DType autocast_dtype();
class AutocastScope {
 public:
  explicit AutocastScope(DType compute);  // f32: autocast off inside the scope
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  DType previous_;
};

// TF32 on GPUs: whether cuDNN's f32 convolutions and cuBLAS's f32 GEMMs may run on TF32 tensor cores (10-bit
// mantissa). The library's default: neither (the backend tests compare GPU with CPU at f32 tolerance), or
// both with PACKRAT_CUDA_TF32=1 in the environment (benchmarks); the trainer sets it from `precision` (its
// GPU default: convolutions only, as PyTorch's defaults).
struct Tf32Use {
  bool convolutions = false;
  bool matmuls = false;
};
Tf32Use tf32_use();  // the setting, or both on this thread within a Tf32ForHalfOperands scope
void set_tf32_use(Tf32Use use);

// Within this scope the thread's convolutions and matmuls may run on TF32 tensor cores, whatever
// set_tf32_use says. An op computing at the kernels' edges opens it around its kernels, whose operands
// then hold 16-bit values: TF32 (f32's exponent, 10 mantissa bits) reads bf16's 7 and f16's 10 exactly,
// so the kernel forms the products a 16-bit tensor-core kernel forms and sums them in f32, at
// tensor-core speed (without it a GPU's bf16 step ran its convolutions as exact f32: 0.15x PyTorch's
// bf16 autocast on an H200). A value decoded from compressed storage may carry more bits: TF32 reads it
// rounded to 10, where a 16-bit kernel would read it rounded to 7 or 10.
class Tf32ForHalfOperands {
 public:
  explicit Tf32ForHalfOperands(bool open);  // false: no change
  ~Tf32ForHalfOperands();
  Tf32ForHalfOperands(const Tf32ForHalfOperands&) = delete;
  Tf32ForHalfOperands& operator=(const Tf32ForHalfOperands&) = delete;

 private:
  bool previous_;
};

// A lower-precision op's floating operand in the autocast dtype (t itself when autocast is off or t is not
// floating).
Tensor autocast_operand(const Tensor& t);
// t in f32 where it is 16-bit (t itself otherwise): what an op computing in f32 reads.
Tensor as_f32(const Tensor& t);
// y (computed in f32) back in `dtype` where that is 16-bit: an op's output in its input's dtype.
Tensor in_dtype(const Tensor& y, DType dtype);
// An operand of an op autocast to `data` as its kernels read it when they compute in `kernel`
// (kernel_dtype): its values rounded to `data`, held in `kernel`. Where the backend has no
// kernels for a 16-bit dtype and computes in f32 at the kernels' edges, the weights and output
// gradients are so rounded too, as the 16-bit kernels read them: the same step but for the
// kernels' accumulation (without it a convolution's weight gradient stood 5% from PyTorch's
// bf16 autocast step, against 0.6% with the bf16 kernels).
Tensor at_kernel_edge(const Tensor& t, DType data, DType kernel);
// The dtype of an op's output from its floating inputs' dtypes: 16-bit only when every one is that 16-bit
// dtype (PyTorch's promotion: bf16 + f32 is f32).
DType result_dtype(std::initializer_list<const Tensor*> inputs);

}  // namespace packrat
