// The Tensor entry points of exact packing (quant/bits/bitpack.h): their checks, then the kernels of
// the tensors' device (quant/codec/codec_kernels.h).
#include "core/error.h"
#include "core/tensor.h"
#include "quant/bits/bitpack.h"
#include "quant/codec/codec_kernels.h"

namespace packrat {

namespace {

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

}  // namespace

int64_t pack_codes(const Tensor& src, int bits, const Tensor& packed) {
  check_codes(src, bits, packed, "pack_codes");
  return codecs(src.device(), "pack_codes: the codes").pack_codes(src, bits, packed);
}

void unpack_codes(const Tensor& packed, int bits, const Tensor& out) {
  check_codes(out, bits, packed, "unpack_codes");
  codecs(out.device(), "unpack_codes: the codes").unpack_codes(packed, bits, out);
}

}  // namespace packrat
