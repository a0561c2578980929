// The CUDA rows / embedding / shape primitives on a GPU, where the backend test's small shapes do
// not reach: rows long enough for the block-per-row kernel (and its 1024-thread variant), a
// cross-entropy whose bad target sits far into the batch, the embedding gradient bit for bit
// against the CPU and identical run to run (the sort-based scatter-add), a permute large enough to
// be worth its 32-bit index path, and the scratch these calls take back. Compiled always; each test
// skips with a one-line reason when no GPU is visible. The backend test (backend_rows_test.cpp and
// the shape tests) covers the contracts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/backend.h"
#include "core/build_config.h"
#include "tests/core/backend_test_support.h"
#include "tests/support/errors.h"
#include "tests/support/gpu.h"

namespace packrat {
namespace {

using testing::expect_close;
using testing::host_random;
using testing::host_values;

#define PACKRAT_REQUIRE_GPU() PACKRAT_SKIP_WITHOUT_GPU()

Backend& cpu() { return backend(Device::cpu()); }
Backend& gpu() { return backend(Device::cuda(0)); }

Tensor host_ids(const Shape& shape, const std::vector<int64_t>& v) {
  DeviceScope on_cpu(Device::cpu());
  Tensor t = Tensor::empty(shape, DType::i64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

TEST(CudaRowsDevice, LongRowsTakeTheBlockKernelAndMatchTheCpu) {
  PACKRAT_REQUIRE_GPU();
  const Device d = Device::cuda(0);
  DeviceScope on(d);
  // 1000: a warp per row; 3000: a block of 256 per row; 9000: a block of 1024 per row.
  for (int64_t D : {1000, 3000, 9000}) {
    const std::string what = "D " + std::to_string(D);
    const Shape shape{7, D};
    const Tensor x = host_random(shape, 1, -5.0f, 5.0f), g = host_random(shape, 2);
    const Tensor w = host_random({D}, 3, 0.5f, 1.5f), b = host_random({D}, 4);
    const Tensor y = cpu().softmax_forward(x, 1.0f, DType::f32);
    expect_close(host_values(gpu().softmax_forward(x.to(d), 1.0f, DType::f32)), y.to_vector(), 1e-5f, 1e-9f, "softmax " + what);
    expect_close(host_values(gpu().softmax_backward(y.to(d), g.to(d), 1.0f, DType::f32)), cpu().softmax_backward(y, g, 1.0f, DType::f32).to_vector(), 1e-4f,
                 1e-8f, "softmax backward " + what);

    const auto ln = cpu().layernorm_forward(x, w, b, 1e-5f);
    const auto ln_d = gpu().layernorm_forward(x.to(d), w.to(d), b.to(d), 1e-5f);
    expect_close(host_values(ln_d.y), ln.y.to_vector(), 1e-5f, 1e-5f, "layernorm y " + what);
    expect_close(host_values(ln_d.rstd), ln.rstd.to_vector(), 1e-5f, 0.0f, "layernorm rstd " + what);
    const auto gr = cpu().layernorm_backward(x, ln.mean, ln.rstd, w, g, true, true);
    const auto gr_d = gpu().layernorm_backward(x.to(d), ln.mean.to(d), ln.rstd.to(d), w.to(d), g.to(d), true, true);
    expect_close(host_values(gr_d.dx), gr.dx.to_vector(), 1e-4f, 1e-5f, "layernorm dx " + what);
    expect_close(host_values(gr_d.dweight), gr.dweight.to_vector(), 1e-5f, 1e-5f, "layernorm dweight " + what);
    expect_close(host_values(gr_d.dbias), gr.dbias.to_vector(), 1e-5f, 1e-5f, "layernorm dbias " + what);

    std::vector<int64_t> tv;
    for (int64_t n = 0; n < 7; ++n) tv.push_back((n * 977) % D);
    const Tensor t = host_ids({7}, tv);
    const auto ce = cpu().cross_entropy_forward(x, t, 0.1f, true, kNoIgnoreIndex);
    const auto ce_d = gpu().cross_entropy_forward(x.to(d), t.to(d), 0.1f, true, kNoIgnoreIndex);
    EXPECT_NEAR(host_values(ce_d.loss)[0], ce.loss.item(), 1e-5 * ce.loss.item()) << what;
    EXPECT_EQ(ce_d.count, 7) << what;
    expect_close(host_values(ce_d.probs), ce.probs.to_vector(), 1e-5f, 1e-9f, "cross_entropy probs " + what);
    // The loss gradient as an f64 device scalar, read by the kernel.
    const Tensor g64 = Tensor::from_vector(Shape(), std::vector<double>{0.5});
    expect_close(host_values(gpu().cross_entropy_backward(ce_d.probs, t.to(d), 0.1f, g64, kNoIgnoreIndex, 7)),
                 cpu().cross_entropy_backward(ce.probs, t, 0.1f, g64.to(Device::cpu()), kNoIgnoreIndex, 7).to_vector(),
                 1e-5f, 1e-9f, "cross_entropy backward " + what);
    // Targets 1, 4 and 6 ignored (-100): the mean over the four others, zero rows in the gradient.
    std::vector<int64_t> tiv = tv;
    for (int64_t n : {1, 4, 6}) tiv[n] = -100;
    const Tensor ti = host_ids({7}, tiv);
    const auto ci = cpu().cross_entropy_forward(x, ti, 0.1f, true, -100);
    const auto ci_d = gpu().cross_entropy_forward(x.to(d), ti.to(d), 0.1f, true, -100);
    EXPECT_EQ(ci_d.count, 4) << what;
    EXPECT_NEAR(host_values(ci_d.loss)[0], ci.loss.item(), 1e-5 * ci.loss.item()) << what;
    expect_close(host_values(gpu().cross_entropy_backward(ci_d.probs, ti.to(d), 0.1f, g64, -100, 4)),
                 cpu().cross_entropy_backward(ci.probs, ti, 0.1f, g64.to(Device::cpu()), -100, 4).to_vector(), 1e-5f,
                 1e-9f, "cross_entropy backward, ignoring " + what);
  }
}

TEST(CudaRowsDevice, CrossEntropyNamesTheFirstBadTargetOfALargeBatch) {
  PACKRAT_REQUIRE_GPU();
  const Device d = Device::cuda(0);
  DeviceScope on(d);
  const int64_t N = 5000, C = 10;
  std::vector<int64_t> tv(N, 3);
  tv[4321] = 10;
  tv[4999] = -2;
  LayerScope layer("head");
  const int64_t held = Allocator::of(d).current(MemTag::Workspace);  // a cuBLAS handle's, if one was made
  const std::string m = testing::message_of([&] {
    gpu().cross_entropy_forward(host_random({N, C}, 5).to(d), host_ids({N}, tv).to(d), 0.0f, false, kNoIgnoreIndex);
  });
  EXPECT_EQ(m, "cross_entropy head: target 10 of sample 4321 is out of range [0, 10)");
  EXPECT_EQ(Allocator::of(d).current(MemTag::Workspace), held);  // the flag and row losses are given back
}

TEST(CudaRowsDevice, EmbeddingGradientIsTheCpusBitForBitAndTheSameEveryRun) {
  PACKRAT_REQUIRE_GPU();
  const Device d = Device::cuda(0);
  DeviceScope on(d);
  const int64_t num = 300, D = 67, count = 20000;
  std::vector<int64_t> idv(count);
  for (int64_t i = 0; i < count; ++i) idv[i] = (i % 7 == 0) ? 5 : (i * 7919) % 250;  // id 5 repeats ~3000 times
  const Tensor ids = host_ids({40, 500}, idv), g = host_random({40, 500, D}, 6);
  const std::vector<float> want = cpu().embedding_backward(g, ids, num).to_vector();
  const Tensor ids_d = ids.to(d), g_d = g.to(d);
  const int64_t held = Allocator::of(d).current(MemTag::Workspace);  // a cuBLAS handle's, if one was made
  EXPECT_EQ(host_values(gpu().embedding_backward(g_d, ids_d, num)), want);
  EXPECT_EQ(host_values(gpu().embedding_backward(g_d, ids_d, num)), want);
  EXPECT_EQ(Allocator::of(d).current(MemTag::Workspace), held);

  const Tensor w = host_random({num, D}, 7);
  EXPECT_EQ(host_values(gpu().embedding_forward(w.to(d), ids_d)), cpu().embedding_forward(w, ids).to_vector());
  std::vector<int64_t> bad = idv;
  bad[17777] = num;
  LayerScope layer("tok_emb");
  EXPECT_EQ(testing::message_of([&] { gpu().embedding_forward(w.to(d), host_ids({count}, bad).to(d)); }),
            "embedding tok_emb: id 300 at position 17777 is out of range [0, 300)");
}

TEST(CudaRowsDevice, PermuteOfAnAttentionSizedTensorMatchesTheCpu) {
  PACKRAT_REQUIRE_GPU();
  const Device d = Device::cuda(0);
  DeviceScope on(d);
  // (N, T, 3, H, hd) -> (3, N, H, T, hd), as multihead attention splits its heads.
  const Tensor x = host_random({8, 65, 3, 6, 32}, 8);
  const std::vector<int64_t> perm{2, 0, 3, 1, 4};
  EXPECT_EQ(host_values(gpu().permute(x.to(d), perm)), cpu().permute(x, perm).to_vector());
  const Tensor x64 = x.to(DType::i64);
  const Tensor got = gpu().permute(x64.to(d), perm).to(Device::cpu()), want = cpu().permute(x64, perm);
  EXPECT_EQ(std::vector<int64_t>(got.data<int64_t>(), got.data<int64_t>() + got.numel()),
            std::vector<int64_t>(want.data<int64_t>(), want.data<int64_t>() + want.numel()));
}

}  // namespace
}  // namespace packrat
