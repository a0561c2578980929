#pragma once
// The CPU backend's blocked layouts: channels in blocks innermost, the block oneDNN's jit
// convolutions read and write on this CPU: nChw16c with AVX-512, nChw8c without (AVX2). Used only
// when C is a multiple of the block, so no padding is ever held. Code outside core/cpu/ never
// creates them; it meets them only as "the layout this tensor came in". Either blocked layout
// is accepted on any CPU (a tensor made elsewhere, a test's); convolutions make the native one.
//
// Channels-last (NHWC) activations: where a convolution's kernels read and write only NHWC
// (oneDNN's AMX kernels, 16-bit), its outputs and data gradients stay NHWC, so that the ops
// between two convolutions (batchnorm, activations, additions, pooling, codecs) walk NHWC and no
// reorder surrounds the kernel (channels_last_convolutions).
#include <cstdint>

#include "core/dtype.h"

namespace packrat::cpu {

// The blocked layout oneDNN's jit convolutions use on this CPU: nChw16c or nChw8c.
Layout native_blocked_layout();

// The native blocked layout for C channels where it holds no padding, plain otherwise.
inline Layout blocked_if_aligned(int64_t C) {
  const Layout blocked = native_blocked_layout();
  return C % channel_block(blocked) == 0 ? blocked : Layout::Plain;
}

// Which layout the CPU's convolutions give their activations: Auto (channels-last where the
// kernels are AMX's, blocked elsewhere), or one of the two everywhere (tests, A/B benchmarks).
// The environment's PACKRAT_CPU_ACTIVATIONS=blocked|channels_last sets it at start-up.
enum class ActivationLayout { Auto, Blocked, ChannelsLast };
void set_activation_layout(ActivationLayout l);
ActivationLayout activation_layout();
// Sets the layout for a scope (tests, benchmarks), then restores the one before.
class ActivationLayoutScope {
 public:
  explicit ActivationLayoutScope(ActivationLayout l) : before_(activation_layout()) { set_activation_layout(l); }
  ~ActivationLayoutScope() { set_activation_layout(before_); }
  ActivationLayoutScope(const ActivationLayoutScope&) = delete;
  ActivationLayoutScope& operator=(const ActivationLayoutScope&) = delete;

 private:
  ActivationLayout before_;
};
// Whether convolutions computing in `dtype` read and write NHWC: under Auto, 16-bit ones on a CPU
// with AMX (oneDNN's AMX kernels read only NHWC; blocked tensors cost a reorder at each edge).
bool channels_last_convolutions(DType dtype);

// Element offset of logical (n, c, h, w) in a 4-d buffer of the given layout (plain, blocked or NHWC).
inline int64_t nchw_offset(Layout l, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (l == Layout::NHWC) return ((n * H + h) * W + w) * C + c;
  const int64_t B = channel_block(l);
  if (B == 0) return ((n * C + c) * H + h) * W + w;
  const int64_t cb = c / B, ci = c % B;
  return (((n * (C / B) + cb) * H + h) * W + w) * B + ci;
}

}  // namespace packrat::cpu
