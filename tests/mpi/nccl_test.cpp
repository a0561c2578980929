// The NCCL communicator, run by every rank of packrat_mpi_tests: the CTest test
// distributed.nccl_one_rank runs it in a one-rank world (a machine with one GPU can), and
// distributed.two_ranks runs it too where there is a GPU per rank. Elsewhere it skips, saying why.
#include <gtest/gtest.h>

#include <vector>

#include "core/autograd_meta.h"
#include "core/backend.h"
#include "core/build_config.h"
#include "core/philox.h"
#include "distributed/communicator.h"
#include "distributed/gradient_reducer.h"

using namespace packrat;

namespace {

int visible_gpus() {
  int n = 0;
  for (Backend* b : available_backends()) n += b->device().is_cpu() ? 0 : 1;
  return n;
}

// Skips unless this build has NCCL and every rank of the world can have a GPU of its own.
#define SKIP_WITHOUT_A_GPU_PER_RANK(world)                                                                         \
  if (!dist::built_with_nccl()) GTEST_SKIP() << "built without NCCL (needs the CUDA backend, MPI and libnccl)"; \
  if (visible_gpus() < (world).local_size())                                                                     \
  GTEST_SKIP() << (world).local_size() << " rank(s) on this host but " << visible_gpus() << " GPU(s) visible"

std::unique_ptr<dist::Communicator> world_on(const char* backend) {
  dist::CommunicatorOptions o;
  o.backend = backend;
  o.cuda_tensors = std::string(backend) == "nccl";
  o.timeout_s = 60;
  return dist::make_communicator(o);
}

// Different values on every rank, the same on every run.
std::vector<float> values_of_rank(int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint32_t r[4];
    Philox4x32::generate(17, static_cast<uint64_t>(rank), static_cast<uint64_t>(i), r);
    v[static_cast<size_t>(i)] = Philox4x32::to_uniform(r[0]) * 4.0f - 2.0f;
  }
  return v;
}

TEST(Nccl, AllReduceOfAGpuBufferGivesTheMpiPathsNumbers) {
  auto mpi = world_on("mpi");
  SKIP_WITHOUT_A_GPU_PER_RANK(*mpi);
  auto nccl = world_on("nccl");
  EXPECT_NE(std::string(nccl->backend_name()).find("nccl"), std::string::npos) << nccl->backend_name();
  const int64_t n = 100003;  // not a multiple of any chunk size
  std::vector<float> host = values_of_rank(mpi->rank(), n);
  const Tensor gpu = Tensor::from_vector(Shape{n}, host).to(Device::cuda(nccl->local_rank()));
  mpi->all_reduce_sum(host.data(), n, "mpi sum");
  nccl->all_reduce_sum(gpu.device_data<float>(), n, "nccl sum");
  const std::vector<float> got = gpu.to(Device::cpu()).to_vector();
  // One or two ranks: one addition, the same in both; more ranks may add in another order.
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(got[i], host[i], 1e-6f * (std::abs(host[i]) + 1.0f)) << i;

  // Host memory given to the NCCL communicator goes to MPI.
  std::vector<double> on_host{1.0, 2.0};
  nccl->all_reduce_sum(on_host.data(), 2, "host sum");
  EXPECT_EQ(on_host[1], 2.0 * nccl->size());
}

TEST(Nccl, GradientBucketsOnTheGpuAverageAsTheMpiPathDoes) {
  auto mpi = world_on("mpi");
  SKIP_WITHOUT_A_GPU_PER_RANK(*mpi);
  auto nccl = world_on("nccl");
  const Device gpu(Device::cuda(nccl->local_rank()));
  // Two parameters with gradients, as the tape leaves them; a small bucket size makes 2 buckets.
  auto make = [&](Device d, std::vector<Tensor>& params) {
    for (int64_t k = 0; k < 2; ++k) {
      const int64_t n = 1000 + 37 * k;
      Tensor p = Tensor::zeros(Shape{n}).to(d);
      p.set_requires_grad();
      p.autograd_meta()->grad = Tensor::from_vector(Shape{n}, values_of_rank(mpi->rank() * 2 + static_cast<int>(k), n)).to(d);
      params.push_back(p);
    }
  };
  std::vector<Tensor> on_cpu, on_gpu;
  make(Device::cpu(), on_cpu);
  make(gpu, on_gpu);
  const double share = 1.0 / mpi->size();
  dist::GradientReducer by_mpi(*mpi, on_cpu, {.bucket_bytes = 4000, .overlap = false});
  dist::GradientReducer by_nccl(*nccl, on_gpu, {.bucket_bytes = 4000, .overlap = false});
  EXPECT_EQ(by_nccl.num_buckets(), 2);
  by_mpi.begin(share);
  by_mpi.finish();
  by_nccl.begin(share);
  by_nccl.finish();
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(on_gpu[k].grad().device(), gpu);
    const std::vector<float> want = on_cpu[k].grad().to_vector(), got = on_gpu[k].grad().to(Device::cpu()).to_vector();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f * (std::abs(want[i]) + 1.0f)) << k << " " << i;
  }
}

}  // namespace
