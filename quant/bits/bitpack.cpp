// The Tensor entry points of exact packing (quant/bits/bitpack.h): the CPU kernels on CPU tensors, the
// CUDA kernels of bitpack_cuda.cu on a GPU's, the CPU kernels through the test seam on the
// emulated GPU's (quant/codec/codec_device.h).
#include <type_traits>

#include "core/build_config.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "quant/bits/bitpack.h"
#include "quant/bits/bitpack_device.h"
#include "quant/codec/codec_device.h"
#include "quant/store/with_integers.h"
#if PACKRAT_HAVE_CUDA
#include "core/cuda/launch_check.h"
#endif

namespace packrat {

namespace {

constexpr int64_t kGrainBlocks = kMinParallelWork / 8;  // blocks of 8 codes per thread chunk, at least

void check_codes(const Tensor& codes, int bits, const Tensor& packed, const char* where) {
  const DType d = codes.dtype();
  PACKRAT_CHECK(d == DType::u8 || d == DType::i32 || d == DType::i64, "{}: codes must be integers (u8, i32, i64), got {}",
                where, dtype_name(d));
  PACKRAT_CHECK(bits >= 1 && bits <= 8, "{}: bits must be in [1, 8], got {}", where, bits);
  PACKRAT_CHECK(packed.dtype() == DType::u8 && packed.nbytes() >= static_cast<size_t>(packed_bytes(codes.numel(), bits)),
                "{}: {} codes of {} bits need {} packed bytes, {} given", where, codes.numel(), bits,
                packed_bytes(codes.numel(), bits), packed.nbytes());
  PACKRAT_CHECK(packed.device() == codes.device(), "{}: codes on {}, packed bytes on {}", where, codes.device().str(),
                packed.device().str());
}

// Index of the first of n values outside [0, limit), or -1.
template <typename T>
int64_t first_unfit(const T* x, int64_t n, int64_t limit) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(x[i]);
    if (v < 0 || v >= limit) return i;
  }
  return -1;
}

int64_t pack_codes_cpu(const Tensor& src, int bits, uint8_t* dst) {
  const int64_t n = src.numel();
  int64_t bad = -1;
  with_integers(src, [&](const auto* p) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
    bad = first_unfit(p, n, int64_t{1} << bits);
    if (bad >= 0) return;
    if constexpr (std::is_same_v<T, uint8_t>) {
      pack_bits(p, n, bits, dst);
    } else {  // wider integers: packed straight from their values, no u8 copy
      const PackCodesBody<T, IgnoreUnfit> body{p, n, bits, dst, {}};
      parallel_chunks((n + 7) / 8, kGrainBlocks, [&](int64_t b, int64_t e) {
        for (int64_t blk = b; blk < e; ++blk) body(blk);
      });
    }
  });
  return bad;
}

void unpack_codes_cpu(const uint8_t* src, int bits, const Tensor& out) {
  const int64_t n = out.numel();
  with_integers(out, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    if constexpr (std::is_same_v<T, uint8_t>) {
      unpack_bits(src, n, bits, p);
    } else {
      const UnpackCodesBody<T> body{src, n, bits, p};
      parallel_chunks((n + 7) / 8, kGrainBlocks, [&](int64_t b, int64_t e) {
        for (int64_t blk = b; blk < e; ++blk) body(blk);
      });
    }
  });
}

}  // namespace

int64_t pack_codes(const Tensor& src, int bits, const Tensor& packed) {
  check_codes(src, bits, packed, "pack_codes");
  if (src.is_cpu()) return pack_codes_cpu(src, bits, packed.data<uint8_t>());
  int64_t first = -1;
  if (codec_ran_on_host(src.device(), {src, packed}, [&] { first = pack_codes(src, bits, packed); })) return first;
#if PACKRAT_HAVE_CUDA
  const Tensor flag = Tensor::empty({1}, DType::i64, Layout::Plain, MemTag::Workspace, src.device());  // (1,)
  cuda::launch_pack_codes(src.raw(), static_cast<int>(dtype_size(src.dtype())), src.numel(), bits,
                          packed.device_data<uint8_t>(), flag.device_data<int64_t>());
  cuda::check_last_launch("pack_codes");
  return flag.to(Device::cpu()).data<int64_t>()[0];  // the one host read: whether the codes are exact
#else
  fail("pack_codes: the codes are on {}, but this packrat was built without CUDA", src.device().str());
#endif
}

void unpack_codes(const Tensor& packed, int bits, const Tensor& out) {
  check_codes(out, bits, packed, "unpack_codes");
  if (out.is_cpu()) return unpack_codes_cpu(packed.data<uint8_t>(), bits, out);
  if (codec_ran_on_host(out.device(), {packed, out}, [&] { unpack_codes(packed, bits, out); })) return;
#if PACKRAT_HAVE_CUDA
  cuda::launch_unpack_codes(packed.device_data<uint8_t>(), out.numel(), bits, out.raw(),
                            static_cast<int>(dtype_size(out.dtype())));
  cuda::check_last_launch("unpack_codes");
#else
  fail("unpack_codes: the codes are on {}, but this packrat was built without CUDA", packed.device().str());
#endif
}

}  // namespace packrat
