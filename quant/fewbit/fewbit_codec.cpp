#include "quant/fewbit/fewbit_codec.h"

#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"
#include "quant/bits/bitpack.h"
#include "quant/codec/codec_kernels.h"

namespace packrat {

void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const Tensor& src, const Tensor& y, const Tensor& packed) {
  const int64_t n = src.numel();
  PACKRAT_CHECK(packed.nbytes() >= static_cast<size_t>(packed_bytes(n, c.bits)) && (!y.defined() || y.numel() == n),
                "fewbit encode: {} elements need {} code bytes, {} given", n, packed_bytes(n, c.bits), packed.nbytes());
  PACKRAT_CHECK(packed.device() == src.device() && (!y.defined() || y.device() == src.device()),
                "fewbit encode: input on {}, codes on {}", src.device().str(), packed.device().str());
  CodecKernels& kernels = codecs(src.device(), "fewbit encode: the input");
  if (!is_half(src.dtype())) return kernels.fewbit_encode(c, fn, src, y, packed);
  PACKRAT_CHECK(!y.defined() || y.dtype() == src.dtype(), "fewbit encode: a {} input's f(x) is {} too, got {}",
                dtype_name(src.dtype()), dtype_name(src.dtype()), y.describe());
  if (src.dtype() == DType::bf16 && src.is_cpu()) return kernels.fewbit_encode(c, fn, src, y, packed);
  const Tensor yf = y.defined() ? Tensor::empty(y.shape(), DType::f32, y.layout(), MemTag::Workspace, y.device()) : Tensor();
  kernels.fewbit_encode(c, fn, src.to(DType::f32), yf, packed);
  if (y.defined()) {
    Tensor dst = y;  // a handle to y's buffer
    backend(y.device()).convert(yf, dst);
  }
}

void fewbit_decode(const FewbitCoder& c, const Tensor& packed, const Tensor& grad, const Tensor& out) {
  const int64_t n = out.numel();
  PACKRAT_CHECK(packed.nbytes() >= static_cast<size_t>(packed_bytes(n, c.bits)) && (!grad.defined() || grad.numel() == n),
                "fewbit decode: {} elements need {} code bytes, {} given", n, packed_bytes(n, c.bits), packed.nbytes());
  PACKRAT_CHECK(out.device() == packed.device() && (!grad.defined() || grad.device() == packed.device()),
                "fewbit decode: codes on {}, output on {}", packed.device().str(), out.device().str());
  codecs(packed.device(), "fewbit decode: the codes").fewbit_decode(c, packed, grad, out);
}

}  // namespace packrat
