#include "quant/fewbit_codec.h"

#include "core/error.h"
#include "core/tensor.h"
#include "quant/bitpack.h"
#include "quant/codec_device.h"

namespace packrat {

void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const Tensor& src, const Tensor& y, const Tensor& packed) {
  check_codec_device("fewbit", src.device(), "its encoder runs on CPU tensors only");
  const int64_t n = src.numel();
  PACKRAT_CHECK(packed.nbytes() >= static_cast<size_t>(packed_bytes(n, c.bits)) && (!y.defined() || y.numel() == n),
                "fewbit encode: {} elements need {} code bytes, {} given", n, packed_bytes(n, c.bits), packed.nbytes());
  fewbit_encode(c, fn, src.raw(), dtype_size(src.dtype()), y.defined() ? y.data<float>() : nullptr, n,
                packed.data<uint8_t>());
}

void fewbit_decode(const FewbitCoder& c, const Tensor& packed, const Tensor& grad, const Tensor& out) {
  check_codec_device("fewbit", packed.device(), "its decoder runs on CPU tensors only");
  const int64_t n = out.numel();
  PACKRAT_CHECK(packed.nbytes() >= static_cast<size_t>(packed_bytes(n, c.bits)) && (!grad.defined() || grad.numel() == n),
                "fewbit decode: {} elements need {} code bytes, {} given", n, packed_bytes(n, c.bits), packed.nbytes());
  fewbit_decode(c, packed.data<uint8_t>(), grad.defined() ? grad.data<float>() : nullptr, out.data<float>(), n);
}

}  // namespace packrat
