#pragma once
// The primitive table: every piece of arithmetic an op, the tape, a store, an optimizer or a
// layer needs, behind one interface per device. `backend(t.device())` dispatches. Op files keep
// what only they know (checks, what they save, their backward rule) and call these for the
// numbers; they never include oneDNN or cuDNN and never loop over data<float>().
//
// Contracts shared by every primitive:
// - Inputs and outputs live on this backend's device (the op checks that operands agree:
//   check_same_device below). A primitive that returns a tensor allocates it on this device
//   under the thread's TagScope / LayerScope.
// - 4-d tensors may come in any layout this backend produces (Tensor::layout()); a primitive
//   documents the layout of what it returns. Elementwise primitives work on buffers as they
//   lie and keep the first operand's layout.
// - f32 unless a dtype is named.
//
// ggml's backend interface and test-backend-ops are the model: tests/core/backend_test.cpp runs
// every primitive of every available backend against a slow scalar reference.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/activation_id.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/tensor.h"

namespace packrat {

// ---------------------------------------------------------------- geometry (device-agnostic)

struct ConvGeometry {
  int64_t N, Cin, H, W, Cout, KH, KW, OH, OW;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
  bool has_bias;
  double flops() const { return 2.0 * N * Cout * OH * OW * (Cin / groups) * KH * KW; }  // per pass
  std::string key() const;
};

// Auto lets a backend pick the fastest algorithm (Winograd on the CPU, at the price of a larger
// Workspace); Direct keeps memory lowest. Process-wide; every backend reads it.
enum class ConvAlgorithm { Auto, Direct };
void set_conv_algorithm(ConvAlgorithm a);
ConvAlgorithm conv_algorithm_setting();

struct PoolGeometry {
  int64_t N, C, H, W, OH, OW, KH, KW, stride_h, stride_w, pad_h, pad_w;
};
enum class PoolKind { Max, AvgIncludePadding, AvgExcludePadding };

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };

// ---------------------------------------------------------------- the interface

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string_view name() const = 0;  // "cpu (oneDNN + OpenMP)"
  virtual Allocator& allocator() = 0;

  // ---- memory: copy, fill, reorder, convert
  // dst = src, same shape, dtype and layout; one side may be on the CPU (host <-> device copy).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  virtual void fill(Tensor& t, double value) = 0;  // every element, any dtype
  // t in `layout` (t itself when already there); tag from the TagScope.
  virtual Tensor to_layout(const Tensor& t, Layout layout) = 0;
  // dst = static_cast<dst dtype>(src), same shape and layout.
  virtual void convert(const Tensor& src, Tensor& dst) = 0;

  // ---- convolution (ops/conv2d)

  // ---- matmul (ops/linear)

  // ---- batchnorm (ops/batchnorm)

  // ---- pooling (ops/pool)

  // ---- pointwise activations (ops/activation, stores)

  // ---- elementwise and reductions (ops/elementwise, tape, stores, optimizers)

  // ---- softmax, cross-entropy, layernorm (ops/softmax, ops/cross_entropy, ops/layernorm)

  // ---- dropout and embedding (ops/dropout, ops/embedding)

  // ---- shape ops (ops/shape_ops, layers)

  // ---- optimizer updates (optim)
};

// The backend of a device. The CPU's always exists; asking for a device that this build or
// machine does not have throws packrat::Error saying why ("packrat was built without CUDA").
Backend& backend(Device device);
inline Backend& backend_of(const Tensor& t) { return backend(t.device()); }

// Every backend available in this process (the CPU first), for tests that cover them all.
std::vector<Backend*> available_backends();

// Throws "<op> <layer>: input 0 is on cuda:0, input 1 on cpu" unless all defined tensors share a device.
void check_same_device(std::string_view op, std::initializer_list<const Tensor*> tensors);

}  // namespace packrat
