// CpuBackend: copy, fill, reorder and dtype conversion.
#include <cstring>
#include <type_traits>

#include "core/cpu/bf16_simd.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/dnnl_context.h"
#include "core/cpu/layout.h"
#include "core/cpu/loops.h"
#include "core/parallel.h"
#include "core/typed_dispatch.h"

namespace packrat::cpu {

CpuBackend& cpu_backend() {
  static CpuBackend* instance = new CpuBackend();  // never destroyed, like the CPU allocator
  return *instance;
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  PACKRAT_CHECK(src.is_cpu() && dst.is_cpu(), "copy: the CPU backend copies between CPU tensors, got {} -> {}",
                src.device().str(), dst.device().str());
  PACKRAT_CHECK(src.nbytes() == dst.nbytes() && src.layout() == dst.layout(), "copy: {} into {}", src.describe(),
                dst.describe());
  std::memcpy(dst.raw(), src.raw(), src.nbytes());
}

void CpuBackend::copy_range(const Tensor& src, int64_t src_offset, Tensor& dst, int64_t dst_offset, int64_t count) {
  check_copy_range(src, src_offset, dst, dst_offset, count);
  const size_t es = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw()) + dst_offset * es, static_cast<const char*>(src.raw()) + src_offset * es,
              static_cast<size_t>(count) * es);
}

void CpuBackend::fill(Tensor& t, double value) {
  const int64_t n = t.numel();
  if (value == 0.0) {
    std::memset(t.raw(), 0, t.nbytes());
    return;
  }
  auto go = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    const T v = cast_element<T>(value);
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  };
  with_typed(t.raw(), t.dtype(), go);
}

Tensor CpuBackend::to_layout(const Tensor& t, Layout layout) {
  const DeviceScope on_cpu(Device::cpu());  // the result lives on the CPU whatever the caller's scope
  return cpu::to_layout(t, layout);
}

void CpuBackend::convert(const Tensor& src, Tensor& dst) {
  PACKRAT_CHECK(src.numel() == dst.numel() && src.layout() == dst.layout(), "convert: {} into {}", src.describe(),
                dst.describe());
  const int64_t n = src.numel();
  auto from = [&](const auto* s) {
    auto go = [&](auto* d) {
      using D = std::remove_pointer_t<decltype(d)>;
      // Contiguous chunks; bf16 <-> f32 on bf16_simd.h's lanes (GCC vectorised the scalar widening
      // poorly), the same bits; other pairs value by value.
      using S = std::remove_cv_t<std::remove_pointer_t<decltype(s)>>;
      parallel_chunks(n, kMinParallelWork, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<S, bf16_t> && std::is_same_v<D, float>) simd::to_f32_run(s + b, e - b, d + b);
        else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, bf16_t>) simd::from_f32_run(s + b, e - b, d + b);
        else for (int64_t i = b; i < e; ++i) d[i] = cast_element<D>(s[i]);
      });
    };
    with_typed(dst.raw(), dst.dtype(), go);
  };
  with_typed(const_cast<void*>(src.raw()), src.dtype(), from);
}

// The reorder for dtypes oneDNN does not move (f64, i64): one (n, channel block) slab at a
// time, B planes of HW elements <-> HW groups of B; between two blocked layouts through plain.
Tensor reorder_loop(const Tensor& t, Layout target) {
  if (t.layout() != Layout::Plain && target != Layout::Plain)
    return reorder_loop(reorder_loop(t, Layout::Plain), target);
  Tensor out = empty_cpu(t.shape(), t.dtype(), target);
  const bool to_blocked = target != Layout::Plain;
  const int64_t B = channel_block(to_blocked ? target : t.layout());
  const int64_t N = t.dim(0), C = t.dim(1), HW = t.dim(2) * t.dim(3), CB = C / B;
  const size_t es = dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.raw());
  auto* dst = static_cast<char*>(out.raw());
  rows_for(N * CB, B * HW, [&](int64_t nb) {
    const int64_t base = nb * B * HW;
    for (int64_t s = 0; s < HW; ++s)
      for (int64_t c = 0; c < B; ++c) {
        const int64_t plain = base + c * HW + s, blocked = base + s * B + c;
        const int64_t from = to_blocked ? plain : blocked, to = to_blocked ? blocked : plain;
        std::memcpy(dst + to * es, src + from * es, es);
      }
  });
  return out;
}

}  // namespace packrat::cpu
