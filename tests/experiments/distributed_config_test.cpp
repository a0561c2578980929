// The distributed section of the config, the threads a rank takes, and the launcher detection:
// what a data-parallel run decides before any rank talks to another (no MPI needed).
#include <gtest/gtest.h>

#include <cstdlib>

#include "distributed/communicator.h"
#include "experiments/lib/config.h"
#include "experiments/lib/distributed_run.h"
#include "tests/support/errors.h"

using namespace packrat;
using packrat::testing::message_of;

namespace {
const char* kYaml = "data: {dataset: mnist}\nmodel: {arch: resnet20}\n";
}

TEST(DistributedConfig, KeysParseAndRoundTrip) {
  const Config c = parse_config(kYaml, "d.yaml",
                                {"distributed={backend: mpi, timeout_s: 2.5, sync_batchnorm: true, bucket_bytes: 4096, "
                                 "overlap: false}"});
  EXPECT_EQ(c.distributed.backend, "mpi");
  EXPECT_DOUBLE_EQ(c.distributed.timeout_s, 2.5);
  EXPECT_TRUE(c.distributed.sync_batchnorm);
  EXPECT_EQ(c.distributed.bucket_bytes, 4096);
  EXPECT_FALSE(c.distributed.overlap);
  const Config back = parse_config(config_to_yaml(c), "resolved.yaml");
  EXPECT_EQ(config_to_yaml(back), config_to_yaml(c));
  const Config d = parse_config(kYaml, "d.yaml");
  EXPECT_EQ(d.distributed.backend, "auto");
  EXPECT_FALSE(d.distributed.sync_batchnorm);
  EXPECT_TRUE(d.distributed.overlap);
}

TEST(DistributedConfig, BadValuesNameTheKey) {
  EXPECT_NE(message_of([] { parse_config(kYaml, "d.yaml", {"distributed.backend=gloo"}); }).find("distributed.backend"),
            std::string::npos);
  EXPECT_NE(message_of([] { parse_config(kYaml, "d.yaml", {"distributed.timeout_s=0"}); }).find("distributed.timeout_s"),
            std::string::npos);
  EXPECT_NE(message_of([] { parse_config(kYaml, "d.yaml", {"distributed.nope=1"}); }).find("unknown key"),
            std::string::npos);
}

// Never more threads in total than the host has, at least one per rank, within the rank's affinity.
TEST(DistributedConfig, ThreadsPerRankDoNotOversubscribe) {
  EXPECT_EQ(threads_per_rank(16, 16, 4), 4);
  EXPECT_EQ(threads_per_rank(2, 2, 2), 1);
  EXPECT_EQ(threads_per_rank(2, 2, 4), 1);  // more ranks than cores: one thread each
  EXPECT_EQ(threads_per_rank(16, 2, 2), 2);  // bound to 2 processors by the launcher
  EXPECT_EQ(threads_per_rank(8, 8, 1), 8);
}

// auto picks NCCL for GPU tensors and MPI for host tensors; asking for the one that cannot
// reduce the run's tensors, or for one this build lacks, is an error naming the key.
TEST(DistributedConfig, TheBackendFollowsTheDeviceOfTheTensors) {
  dist::CommunicatorOptions o;
  o.backend = "auto";
  o.cuda_tensors = true;
  if (dist::built_with_nccl()) {
    EXPECT_EQ(dist::resolve_backend(o), "nccl");
  } else {
    EXPECT_NE(message_of([&] { dist::resolve_backend(o); }).find("nccl (auto, for CUDA tensors): this packrat was built "
                                                                 "without NCCL"),
              std::string::npos);
  }
  o.backend = "mpi";
  EXPECT_NE(message_of([&] { dist::resolve_backend(o); }).find("distributed.backend: mpi reduces host memory"),
            std::string::npos);
  o.backend = "nccl";
  o.cuda_tensors = false;
  const std::string m = message_of([&] { dist::resolve_backend(o); });
  EXPECT_NE(m.find(dist::built_with_nccl() ? "nccl reduces GPU tensors" : "built without NCCL"), std::string::npos) << m;
  if (dist::built_with_mpi()) {
    o.backend = "auto";
    EXPECT_EQ(dist::resolve_backend(o), "mpi");
  }
}

TEST(DistributedConfig, LauncherIsDetectedFromItsEnvironment) {
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("PMIX_RANK");
  ::unsetenv("PMI_SIZE");
  ::unsetenv("MPI_LOCALNRANKS");
  EXPECT_FALSE(dist::launched_by_mpi_launcher());
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_TRUE(dist::launched_by_mpi_launcher());
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
}
