// The CUDA memory-efficient attention's bodies (core/cuda/kernels/attention.h), run on the host
// with no GPU as `lanes` cooperating threads (tests/support/host_rows.h), against the CPU
// backend's tiled kernels: forward (y, lse) and both backward passes (dq, D; dk, dv), with causal
// and padding masks and dropout. Lane counts 1, 3 and 32 (a warp) over heads of 8 and 20 (a lane
// holds up to kAttentionMaxPerLane of a head). Also the key padding fill and sequence lengths.
// What only a GPU checks: the warp shuffles and the launch geometry (attention_kernels.cu).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cuda/kernels/attention.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/host_launch.h"
#include "tests/support/host_rows.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::run_on_host;
using testing::run_rows_on_host;

Backend& cpu() { return backend(Device::cpu()); }

Tensor host_i64(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(v.size())}, DType::i64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

std::vector<float> values(const Tensor& t) { return t.to_vector(); }

std::vector<int64_t> ints(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

TEST(CudaKernelsAttention, RowBodiesMatchTheCpuBackend) {
  DeviceScope on_cpu(Device::cpu());
  const int64_t B = 2, H = 2, G = B * H, T = 9, S = 11;
  const Tensor lengths = host_i64({11, 6});
  for (const auto& [E, Ev] : std::vector<std::pair<int64_t, int64_t>>{{8, 6}, {20, 20}}) {
    const Tensor q = host_random({G, T, E}, 1), k = host_random({G, S, E}, 2), v = host_random({G, S, Ev}, 3);
    const Tensor dy = host_random({G, T, Ev}, 4);
    for (int mode = 0; mode < 4; ++mode) {
      Backend::AttentionArgs a;
      a.T = T, a.S = S, a.E = E, a.Ev = Ev, a.heads = H;
      a.scale = 0.3f;
      a.causal = mode == 1 || mode == 3;
      const bool padded = mode >= 2;
      if (mode == 3) a.dropout_p = 0.25f, a.seed = 3, a.stream = 8;
      const Tensor len = padded ? lengths : Tensor();
      const auto want = cpu().attention_forward(q, k, v, len, a);
      const auto grads = cpu().attention_backward(q, k, v, want.y, want.lse, dy, len, a, true, true, true);
      cuda::AttentionGeometry geo{q.data<float>(), k.data<float>(), v.data<float>(),
                                  padded ? len.data<int64_t>() : nullptr, T, S, E, Ev, H, a.scale, a.causal,
                                  a.dropout_p, a.seed, a.stream};
      for (int lanes : {1, 3, 32}) {
        if (E > lanes * cuda::kAttentionMaxPerLane) continue;
        const std::string what = "E " + std::to_string(E) + " mode " + std::to_string(mode) + " lanes " +
                                 std::to_string(lanes);
        Tensor y = Tensor::empty({G, T, Ev}), lse = Tensor::empty({G, T});
        run_rows_on_host(G * T, lanes, cuda::AttentionForwardRow{geo, y.data<float>(), lse.data<float>()});
        expect_close(values(y), values(want.y), 1e-5f, 1e-6f, "y " + what);
        expect_close(values(lse), values(want.lse), 1e-5f, 1e-6f, "lse " + what);
        Tensor d = Tensor::empty({G, T}), dq = Tensor::empty({G, T, E});
        Tensor dk = Tensor::empty({G, S, E}), dv = Tensor::empty({G, S, Ev});
        run_rows_on_host(G * T, lanes,
                         cuda::AttentionBackwardQueryRow{geo, want.y.data<float>(), want.lse.data<float>(),
                                                         dy.data<float>(), d.data<float>(), dq.data<float>()});
        run_rows_on_host(G * S, lanes,
                         cuda::AttentionBackwardKeyRow{geo, want.lse.data<float>(), dy.data<float>(), d.data<float>(),
                                                       dk.data<float>(), dv.data<float>()});
        expect_close(values(dq), values(grads.dq), 1e-4f, 1e-5f, "dq " + what);
        expect_close(values(dk), values(grads.dk), 1e-4f, 1e-5f, "dk " + what);
        expect_close(values(dv), values(grads.dv), 1e-4f, 1e-5f, "dv " + what);
      }
    }
  }
}

TEST(CudaKernelsAttention, KeyPaddingAndSequenceLengthsMatchTheCpuBackend) {
  DeviceScope on_cpu(Device::cpu());
  const Tensor lengths = host_i64({5, 0, 9});  // 0 reads as 1, 9 as S = 7
  Tensor want = host_random({3, 2, 4, 7}, 5), got = want.clone();
  cpu().key_padding_fill(want, lengths);
  run_on_host(got.numel(), cuda::KeyPaddingFill{got.data<float>(), lengths.data<int64_t>(), 8, 7});
  EXPECT_EQ(values(got), values(want));
  const auto w = values(want);
  EXPECT_TRUE(std::isinf(w[5]) && std::isfinite(w[4]));        // sample 0: keys 5, 6 masked
  EXPECT_TRUE(std::isfinite(w[56]) && std::isinf(w[57]));       // sample 1: only key 0 kept
  Tensor tokens = Tensor::empty({3, 4}, DType::i64);
  const int64_t ids[] = {5, 6, 0, 0, 0, 3, 3, 3, 7, 7, 7, 7};  // pad 0 first, in the middle, absent
  for (int i = 0; i < 12; ++i) tokens.data<int64_t>()[i] = ids[i];
  const Tensor want_len = cpu().sequence_lengths(tokens, 0);
  EXPECT_EQ(ints(want_len), (std::vector<int64_t>{2, 1, 4}));
  Tensor got_len = Tensor::empty({3}, DType::i64);
  run_on_host(3, cuda::SequenceLengths{tokens.data<int64_t>(), got_len.data<int64_t>(), 4, 0});
  EXPECT_EQ(ints(got_len), ints(want_len));
}

}  // namespace
}  // namespace packrat
