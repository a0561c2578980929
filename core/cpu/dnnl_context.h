#pragma once
// oneDNN glue for the CPU backend: the engine, a per-thread stream, memory descriptors for
// packrat tensors as they lie (plain, nChw16c or nChw8c), user-mode scratchpads allocated as
// packrat tensors (so the allocator sees every byte), and reorders into packrat buffers.
// Only files under core/cpu/ and the .cpp files of the ops include this header.
#include <oneapi/dnnl/dnnl.hpp>

#include <optional>
#include <string>
#include <unordered_map>

#include "core/cpu/layout.h"
#include "core/tensor.h"

namespace packrat::cpu {

dnnl::engine& dnnl_engine();
// Whether oneDNN runs AVX-512 kernels here (dnnl::get_effective_cpu_isa()). Its nChw16c jit
// kernels and Winograd convolutions need them; on AVX2 its jit convolutions read and write
// nChw8c (core/cpu/layout.h: native_blocked_layout).
bool avx512_kernels();
// Whether oneDNN runs native bf16 kernels here (AVX512_BF16, or AMX which implies it).
bool bf16_kernels();
// Whether oneDNN runs AMX bf16 kernels here (Sapphire Rapids and later). Its AMX convolutions
// read and write channels-last tensors (core/cpu/conv.cpp).
bool amx_kernels();
dnnl::stream& dnnl_stream();  // one per thread

// Attributes every packrat primitive uses: strict fp32 math (no bf16 down-conversion) and
// a user-provided scratchpad.
dnnl::primitive_attr dnnl_attr();

dnnl::memory::data_type dnnl_type(DType t);
// The memory descriptor of a buffer of this shape/dtype/layout: plain row-major for any rank,
// nChw16c / nChw8c for 4-d blocked tensors, nhwc for a convolution's channels-last gradient copy
// (conv_grad_output).
dnnl::memory::desc desc_for(const Shape& shape, DType dtype, Layout layout);
inline dnnl::memory::desc desc_of(const Tensor& t) { return desc_for(t.shape(), t.dtype(), t.layout()); }
// Wraps a tensor's buffer (no copy) with the given descriptor (default: as it lies).
dnnl::memory memory_of(const Tensor& t);
dnnl::memory memory_of(const Tensor& t, const dnnl::memory::desc& d);

// The Layout a 4-d descriptor describes (nchw, or unpadded nChw16c or nChw8c), if it is one of ours.
std::optional<Layout> layout_of(const dnnl::memory::desc& d);

// t in `layout` (t itself when already there): like Tensor::to_layout, but with oneDNN's
// vectorised, threaded reorder. The result's tag follows the current TagScope.
Tensor to_layout(const Tensor& t, Layout layout);
// The same with a plain loop, for dtypes oneDNN does not reorder (f64, i64).
Tensor reorder_loop(const Tensor& t, Layout layout);

// Reorders `src` (described by src_desc) into a new tensor laid out as `want`. The result is
// a 1-d f32 tensor of want.get_size()/4 elements (an opaque buffer) tagged `tag`.
Tensor reorder_into_buffer(const Tensor& src, const dnnl::memory::desc& src_desc, const dnnl::memory::desc& want,
                           MemTag tag);
// Reorders an opaque buffer laid out as `from` into `dst` as it lies.
void reorder_from_buffer(const Tensor& buffer, const dnnl::memory::desc& from, Tensor& dst);

// Runs a primitive, adding a scratchpad tensor (Workspace tag) of the size the descriptor asks.
void execute(const dnnl::primitive& p, const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory> args);

// Copies `from` into `to` (any two layouts of the same dims) with a oneDNN reorder whose
// scratchpad, if any, is a packrat tensor.
void reorder(const dnnl::memory& from, const dnnl::memory& to);


// oneDNN dims from int64.
inline dnnl::memory::dims dims_of(const Shape& s) { return dnnl::memory::dims(s.dims().begin(), s.dims().end()); }

}  // namespace packrat::cpu
