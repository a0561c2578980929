#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/half.h"  // bf16_t, f16_t

namespace packrat {

// bf16 and f16: 16-bit floats (core/half.h), what autocast computes and saves in.
enum class DType : uint8_t { f32, f64, u8, i32, i64, bf16, f16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::u8: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "?";
}

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<bf16_t>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16_t>() { return DType::f16; }

// The 16-bit floating-point dtypes.
constexpr bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }
// f32 or a 16-bit float: what the ops take as activations (16-bit ones under autocast).
constexpr bool is_f32_or_half(DType t) { return t == DType::f32 || is_half(t); }
// Floating-point dtypes: what carries a gradient.
constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || is_half(t); }

// Memory layout of a 4-d (N, C, H, W) tensor. The logical shape is always NCHW. Plain is
// row-major; any other layout is a backend's own (the CPU's nChw16c on AVX-512 and nChw8c without
// it, channels in blocks of 16 or 8 innermost, see core/cpu/layout.h; the CUDA backend's NHWC,
// channels innermost, which cuDNN's tensor-core convolutions read without a transpose): only that
// backend creates it, ops and stores keep a tensor's layout as it comes and ask the backend for
// plain data where they need it (Tensor::to_plain).
enum class Layout : uint8_t { Plain, nChw16c, NHWC, nChw8c };
constexpr std::string_view layout_name(Layout l) {
  switch (l) {
    case Layout::Plain: return "plain";
    case Layout::nChw16c: return "nChw16c";
    case Layout::NHWC: return "NHWC";
    case Layout::nChw8c: return "nChw8c";
  }
  return "?";
}
// The channels a block of a channel-blocked layout holds (nChw16c: 16, nChw8c: 8); 0 otherwise.
constexpr int64_t channel_block(Layout l) {
  return l == Layout::nChw16c ? 16 : l == Layout::nChw8c ? 8 : 0;
}

}  // namespace packrat
