#include "quant/fewbit/fewbit_codec.h"

#include "autograd/pointwise.h"
#include "core/build_config.h"
#include "core/error.h"
#include "core/tensor.h"
#include "quant/bits/bitpack.h"
#include "quant/codec/codec_device.h"
#if PACKRAT_HAVE_CUDA
#include "core/cuda/launch_check.h"
#include "quant/fewbit/fewbit_device.h"
#endif

namespace packrat {

void fewbit_encode(const FewbitCoder& c, const Pointwise* fn, const Tensor& src, const Tensor& y, const Tensor& packed) {
  const int64_t n = src.numel();
  PACKRAT_CHECK(packed.nbytes() >= static_cast<size_t>(packed_bytes(n, c.bits)) && (!y.defined() || y.numel() == n),
                "fewbit encode: {} elements need {} code bytes, {} given", n, packed_bytes(n, c.bits), packed.nbytes());
  PACKRAT_CHECK(packed.device() == src.device() && (!y.defined() || y.device() == src.device()),
                "fewbit encode: input on {}, codes on {}", src.device().str(), packed.device().str());
  if (src.is_cpu()) {
    fewbit_encode(c, fn, src.raw(), dtype_size(src.dtype()), y.defined() ? y.data<float>() : nullptr, n,
                  packed.data<uint8_t>());
    return;
  }
  if (codec_ran_on_host(src.device(), {src, y, packed}, [&] { fewbit_encode(c, fn, src, y, packed); })) return;
#if PACKRAT_HAVE_CUDA
  PACKRAT_CHECK(c.bits >= 1 && c.bits <= 4, "fewbit encode: bits must be in [1, 4], got {}", c.bits);
  PACKRAT_CHECK(fn || (c.kind != FewbitKind::Step && !y.defined()),
                "fewbit encode: a step mask or the forward value needs the activation");
  const ActivationId id = fn ? fn->id : ActivationId::relu;
  cuda::launch_fewbit_encode(c, fn ? &id : nullptr, src.raw(), y.defined() ? y.device_data<float>() : nullptr, n,
                             packed.device_data<uint8_t>());
  cuda::check_last_launch("fewbit encode");
#else
  fail("fewbit encode: the input is on {}, but this packrat was built without CUDA", src.device().str());
#endif
}

void fewbit_decode(const FewbitCoder& c, const Tensor& packed, const Tensor& grad, const Tensor& out) {
  const int64_t n = out.numel();
  PACKRAT_CHECK(packed.nbytes() >= static_cast<size_t>(packed_bytes(n, c.bits)) && (!grad.defined() || grad.numel() == n),
                "fewbit decode: {} elements need {} code bytes, {} given", n, packed_bytes(n, c.bits), packed.nbytes());
  PACKRAT_CHECK(out.device() == packed.device() && (!grad.defined() || grad.device() == packed.device()),
                "fewbit decode: codes on {}, output on {}", packed.device().str(), out.device().str());
  if (packed.is_cpu()) {
    fewbit_decode(c, packed.data<uint8_t>(), grad.defined() ? grad.data<float>() : nullptr, out.data<float>(), n);
    return;
  }
  if (codec_ran_on_host(packed.device(), {packed, grad, out}, [&] { fewbit_decode(c, packed, grad, out); })) return;
#if PACKRAT_HAVE_CUDA
  PACKRAT_CHECK(c.bits >= 1 && c.bits <= 4, "fewbit decode: bits must be in [1, 4], got {}", c.bits);
  cuda::launch_fewbit_decode(c, packed.device_data<uint8_t>(), grad.defined() ? grad.device_data<float>() : nullptr,
                             out.device_data<float>(), n);
  cuda::check_last_launch("fewbit decode");
#else
  fail("fewbit decode: the codes are on {}, but this packrat was built without CUDA", packed.device().str());
#endif
}

}  // namespace packrat
