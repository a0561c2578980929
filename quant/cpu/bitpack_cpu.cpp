// The CPU kernels of bit packing (quant/bits/bitpack.h): BMI2 pext/pdep where the build has it,
// OpenMP over blocks of 8 codes; the same layout as the per-block helpers of the header.
#include "quant/bits/bitpack.h"

#include <cstring>
#if defined(__BMI2__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/parallel.h"
#include "quant/cpu/code_bits.h"

namespace packrat {

namespace {

constexpr int64_t kGrainBlocks = kMinParallelWork / 4;  // blocks of 8 codes per thread chunk, at least

void check_bits(int bits, const char* where) {
  PACKRAT_CHECK(bits >= 1 && bits <= 8, "{}: bits must be in [1, 8], got {}", where, bits);
}

// Full blocks [b, e) of 8 codes each; B is the bit-width as a compile-time constant so the
// shifts fold and the loop vectorises.
// With BMI2, one pext gathers the low B bits of eight code bytes and one pdep spreads them back.
template <int B>
void pack_blocks(const uint8_t* codes, int64_t b, int64_t e, uint8_t* dst) {
  constexpr uint32_t mask = (1u << B) - 1u;
  for (int64_t blk = b; blk < e; ++blk) {
    const uint8_t* c = codes + blk * 8;
#if defined(__BMI2__)
    uint64_t v;
    std::memcpy(&v, c, 8);
    const uint64_t w = _pext_u64(v, 0x0101010101010101ull * mask);
#else
    uint64_t w = 0;
    for (int k = 0; k < 8; ++k) w |= static_cast<uint64_t>(c[k] & mask) << (k * B);
#endif
    store_block8(w, B, dst + blk * B);
  }
}

template <int B>
void unpack_blocks(const uint8_t* src, int64_t b, int64_t e, uint8_t* codes) {
  for (int64_t blk = b; blk < e; ++blk) {
    const uint64_t w = load_block8(src + blk * B, B);
    uint8_t* c = codes + blk * 8;
#if defined(__BMI2__)
    const uint64_t v = _pdep_u64(w, 0x0101010101010101ull * ((1u << B) - 1u));
    std::memcpy(c, &v, 8);
#else
    for (int k = 0; k < 8; ++k) c[k] = static_cast<uint8_t>(block_code(w, k, B));
#endif
  }
}

template <typename Fn>
void dispatch_bits(int bits, Fn&& fn) {  // bits checked by the caller (check_bits)
  with_code_bits<8>(bits, fn);
}

}  // namespace

void pack_bits(const uint8_t* codes, int64_t n, int bits, uint8_t* dst) {
  check_bits(bits, "pack_bits");
  PACKRAT_CHECK(n >= 0, "pack_bits: negative length {}", n);
  const int64_t full = n / 8;  // complete blocks of 8 codes
  dispatch_bits(bits, [&](auto B) {
    parallel_chunks(full, kGrainBlocks, [&](int64_t s, int64_t e) { pack_blocks<B()>(codes, s, e, dst); });
  });
  const int rest = static_cast<int>(n - full * 8);
  if (rest > 0) {  // the tail: fewer than 8 codes in the last, partial block
    const uint32_t mask = (1u << bits) - 1u;
    uint64_t w = 0;
    for (int k = 0; k < rest; ++k) w |= block_put(codes[full * 8 + k] & mask, k, bits);
    store_block8(w, static_cast<int>(packed_bytes(rest, bits)), dst + full * bits);
  }
}

void unpack_bits(const uint8_t* src, int64_t n, int bits, uint8_t* codes) {
  check_bits(bits, "unpack_bits");
  PACKRAT_CHECK(n >= 0, "unpack_bits: negative length {}", n);
  const int64_t full = n / 8;
  dispatch_bits(bits, [&](auto B) {
    parallel_chunks(full, kGrainBlocks, [&](int64_t s, int64_t e) { unpack_blocks<B()>(src, s, e, codes); });
  });
  const int rest = static_cast<int>(n - full * 8);
  if (rest > 0) {
    const uint64_t w = load_block8(src + full * bits, bits, static_cast<int>(packed_bytes(rest, bits)));
    for (int k = 0; k < rest; ++k) codes[full * 8 + k] = static_cast<uint8_t>(block_code(w, k, bits));
  }
}

}  // namespace packrat
