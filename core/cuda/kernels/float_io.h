#pragma once
// Short runs of floats loaded and stored as wide as their address allows on a GPU (float4 for 4
// floats at a 16-byte boundary) and element by element on the host: the same values either way,
// so the host tests of the kernels' bodies check what a GPU reads and writes. The alignment is
// checked at run time: a run may start anywhere.
#include <cstdint>

#include "core/hd.h"

namespace packrat {

// Elementwise kernels take four elements a thread (one float4 each way where aligned): quad q
// is elements [4q, 4q + quad_len(q, n)) of n; quads_of(n) quads cover them.
PACKRAT_HD inline int64_t quads_of(int64_t n) { return (n + 3) / 4; }
PACKRAT_HD inline int quad_len(int64_t q, int64_t n) { return n - 4 * q < 4 ? static_cast<int>(n - 4 * q) : 4; }

// v[0..n) = src[0..n), n <= 4.
PACKRAT_HD inline void load_floats4(const float* src, int n, float* v) {
#if defined(__CUDA_ARCH__)
  if (n == 4 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    const float4 a = *reinterpret_cast<const float4*>(src);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    return;
  }
#endif
  for (int k = 0; k < 4; ++k)
    if (k < n) v[k] = src[k];
}

// v[0..n) = src[0..n), n <= 8 (v[n..8) untouched): two runs of 4 (two float4 where aligned).
PACKRAT_HD inline void load_floats8(const float* src, int n, float* v) {
  load_floats4(src, n < 4 ? n : 4, v);
  if (n > 4) load_floats4(src + 4, n - 4, v + 4);
}

// dst[0..n) = v[0..n), n <= 4.
PACKRAT_HD inline void store_floats4(const float* v, int n, float* dst) {
#if defined(__CUDA_ARCH__)
  if (n == 4 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    // One 16-byte store, in PTX: written as a float4 assignment, the compiler merged this branch
    // with the loop below (the same four addresses and values) into four 4-byte stores, which
    // cost up to 8x the sectors where consecutive threads' quads are not adjacent. Generic
    // addressing: dst may be global or shared memory.
    asm volatile("st.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3])
                 : "memory");
    return;
  }
#endif
  for (int k = 0; k < 4; ++k)
    if (k < n) dst[k] = v[k];
}

}  // namespace packrat
