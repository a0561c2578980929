#pragma once
// PACKRAT_HD marks an inline function that both a CPU kernel and a CUDA kernel call (the
// per-element logic of Philox, the codecs, ...): __host__ __device__ under nvcc, nothing
// otherwise. Written once, so a value computed on one device is bit-identical on the other.
// PACKRAT_UNROLL: `#pragma unroll` for nvcc (a loop over a register array), nothing for the host.
#if defined(__CUDACC__)
#define PACKRAT_HD __host__ __device__
#define PACKRAT_UNROLL _Pragma("unroll")
#else
#define PACKRAT_HD
#define PACKRAT_UNROLL
#endif
