// Data-parallel training, run by every rank of `mpiexec -np 2 packrat_mpi_tests` (CTest
// distributed.two_ranks). Each test trains through run_training, the trainer's own loop, once
// data-parallel over the two ranks and once as a single process on rank 0, and compares.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "distributed/communicator.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/distributed_run.h"
#include "experiments/lib/run.h"
#include "experiments/lib/safetensors.h"
#include "experiments/lib/session.h"
#include "experiments/lib/train_loop.h"
#include "quant/group/gact_store.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

DataParallel* g_world = nullptr;  // made by main

// A directory named by rank 0, the same on every rank.
fs::path shared_dir(const std::string& name) {
  std::string p = g_world->root() ? temp_dir(name).string() : std::string();
  return dist::broadcast_string(*g_world->comm, p, 0, "test directory");
}

fs::path shared_data(const std::string& name, int64_t n_train, int64_t n_test, uint32_t size = 12) {
  std::string p = g_world->root() ? make_idx_dataset(name, n_train, n_test, size).string() : std::string();
  return dist::broadcast_string(*g_world->comm, p, 0, "test data");
}

RunOptions quiet(DataParallel* dp) {
  RunOptions o;
  o.tty = 0;
  o.print_report = false;
  o.dp = dp;
  return o;
}

// The largest |a - b| over every tensor of two checkpoints, relative to the tensor's largest |b|.
std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

double max_relative_difference(const fs::path& a, const fs::path& b, std::string* worst) {
  const SafetensorsFile fa = read_safetensors(a.string()), fb = read_safetensors(b.string());
  double worst_d = 0;
  int compared = 0;
  for (const auto& [name, tb] : fb.tensors) {
    if (tb.dtype() != DType::f32) continue;
    const Tensor* ta = fa.find(name);
    EXPECT_NE(ta, nullptr) << name;
    if (!ta) continue;
    const std::vector<float> va = ta->to_vector(), vb = tb.to_vector();
    double scale = 1e-6, d = 0;
    for (size_t i = 0; i < vb.size(); ++i) {
      scale = std::max(scale, static_cast<double>(std::abs(vb[i])));
      d = std::max(d, static_cast<double>(std::abs(va[i] - vb[i])));
    }
    if (d / scale > worst_d) {
      worst_d = d / scale;
      *worst = name;
    }
    ++compared;
  }
  EXPECT_GT(compared, 50);  // parameters, batchnorm statistics, momentum buffers (ResNet-20, ViT)
  return worst_d;
}

// Trains `sets` on the tiny config twice (2 ranks of batch 8 and one process of batch 16) and
// returns the largest relative difference between the final checkpoints (rank 0; -1 elsewhere).
double two_ranks_against_one(const std::string& name, const std::vector<std::string>& extra) {
  const fs::path data = shared_data(name, 64, 16);
  const fs::path dist_out = shared_dir(name + "_2ranks"), single_out = shared_dir(name + "_1proc");
  std::vector<std::string> sets = {"saved_tensors.rules=[]", "train.epochs=2", "data.limit_train=56"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  run_training(tiny_config(data, dist_out, sets), quiet(g_world));
  if (g_world->root()) run_training(tiny_config(data, single_out, sets), quiet(nullptr));
  g_world->comm->barrier(name);
  if (!g_world->root()) return -1;
  std::string worst;
  const double d = max_relative_difference(latest_checkpoint(dist_out.string()).value(),
                                           latest_checkpoint(single_out.string()).value(), &worst);
  std::printf("%s: largest relative difference %.3g (%s)\n", name.c_str(), d, worst.c_str());
  return d;
}

}  // namespace

// ResNet-20, SGD with Nesterov momentum, weight decay, cosine LR with warm-up, label smoothing,
// gradient clipping, random crops and flips; 2 epochs of 56 images in batches of 16 (the last of 8:
// 4 per rank). With synchronised batchnorm two ranks of batch 8 compute what one process of batch
// 16 does, up to the order of f32 sums. SiLU, not ReLU: a ReLU's kink turns a rounding difference in
// a pre-activation near 0 into a different gradient for that element (two reorderings of the same
// sums in ONE process diverge by percents within a few steps of this model), so over several
// steps only a smooth activation makes "equal within f32 tolerance" a property of the reduction
// rather than of luck. ReLU is compared after one step below.
TEST(DataParallel, TwoRanksMatchOneProcessOnResNet20WithSyncBatchnorm) {
  const double d = two_ranks_against_one("dp_sync_bn", {"distributed.sync_batchnorm=true", "model.activation=silu"});
  if (g_world->root()) {
    EXPECT_LT(d, 2e-4);
  }
}

TEST(DataParallel, TwoRanksMatchOneProcessAfterOneReluStep) {
  const double d = two_ranks_against_one("dp_sync_bn_relu", {"distributed.sync_batchnorm=true", "train.epochs=1",
                                                             "train.steps_per_epoch=1"});
  if (g_world->root()) {
    EXPECT_LT(d, 1e-4);
  }
}

// A Transformer (vit_tiny_fmnist on the 12x12 fixture: patch embedding, layernorm, attention,
// GELU MLP; no batchnorm, so nothing to synchronise): two ranks of batch 8 compute what one process
// of batch 16 does, over 2 epochs.
TEST(DataParallel, TwoRanksMatchOneProcessOnAVisionTransformer) {
  const double d = two_ranks_against_one("dp_vit", {"model.arch=vit_tiny_fmnist"});
  if (g_world->root()) {
    EXPECT_LT(d, 2e-4);
  }
}

// A GPT on bytes (data.dataset: text): its loss is the mean over the batch's tokens, so a rank's
// gradient weighs its share of the global batch's tokens (the trainer once compared a rank's tokens
// with the global batch's samples and refused the first step). Two ranks of batch 4 compute what
// one process of batch 8 does, over 2 epochs (SGD: AdamW's normalised step would magnify the
// reduction order's rounding in gradients near 0).
TEST(DataParallel, TwoRanksMatchOneProcessOnAGptOverText) {
  const fs::path dist_out = shared_dir("dp_text_2ranks"), single_out = shared_dir("dp_text_1proc");
  const fs::path text = shared_dir("dp_text_data") / "text.txt";
  if (g_world->root()) {
    std::ofstream f(text);
    for (int i = 0; i < 400; ++i) f << "line " << i << ": the quick brown fox jumps over the lazy dog " << i * 7 << "\n";
  }
  g_world->comm->barrier("text data");
  auto config = [&](const fs::path& out) {
    return parse_config("seed: 2\n"
                        "data: {dataset: text, root: \"" + text.string() + "\", seq_len: 32, batch_size: 8, "
                        "eval_batch_size: 16}\n"
                        "model: {arch: gpt_tiny}\n"
                        "optimizer: {name: sgd, lr: 0.1, momentum: 0.9}\n"
                        "train: {epochs: 2, steps_per_epoch: 4}\n"
                        "output: {dir: \"" + out.string() + "\"}\n",
                        "text.yaml");
  };
  const RunResult dist = run_training(config(dist_out), quiet(g_world));
  if (g_world->root()) {
    const RunResult single = run_training(config(single_out), quiet(nullptr));
    EXPECT_NEAR(dist.epochs.back().train_loss, single.epochs.back().train_loss, 1e-4);
  }
  g_world->comm->barrier("dp_text");
  if (!g_world->root()) return;
  std::string worst;
  const double d = max_relative_difference(latest_checkpoint(dist_out.string()).value(),
                                           latest_checkpoint(single_out.string()).value(), &worst);
  std::printf("dp_text: largest relative difference %.3g (%s)\n", d, worst.c_str());
  EXPECT_LT(d, 2e-4);
}

// Every block recomputed in backward (memory.recompute): the reducer still starts each bucket when
// its gradients are final (the nested backward reports a parameter ready after its last inner use),
// and the synchronised batchnorm's collectives in the recompute run in the same order on both ranks.
TEST(DataParallel, RecomputedBlocksWithSyncBatchnormMatchOneProcess) {
  const double d = two_ranks_against_one("dp_recompute", {"distributed.sync_batchnorm=true", "model.activation=silu",
                                                          "memory.recompute=[blocks]"});
  if (g_world->root()) {
    EXPECT_LT(d, 2e-4);
  }
}

// Without it, each rank normalises with its own shard's statistics (as PyTorch DDP does by
// default), which is a different computation: the weights drift apart measurably.
TEST(DataParallel, PerRankBatchnormDiffersFromOneProcess) {
  const double d = two_ranks_against_one("dp_local_bn", {"distributed.sync_batchnorm=false", "model.activation=silu"});
  if (g_world->root()) {
    EXPECT_GT(d, 1e-3);
  }
}

// Overlap off (every bucket reduced after the backward) and tiny buckets (one per parameter or
// so) change when the reductions happen, not what they compute.
TEST(DataParallel, BucketingAndOverlapDoNotChangeTheResult) {
  const double d = two_ranks_against_one("dp_buckets", {"distributed.sync_batchnorm=true", "model.activation=silu",
                                                        "distributed.bucket_bytes=4096", "distributed.overlap=false"});
  if (g_world->root()) {
    EXPECT_LT(d, 2e-4);
  }
}

// The memory report is per rank, and a rank of a 2-rank run with global batch 16 holds exactly
// the saved bytes (from the stores and from the allocator) of one process with batch 8.
TEST(DataParallel, SavedBytesPerRankEqualOneProcessWithTheRankBatch) {
  const fs::path data = shared_data("dp_memory", 32, 8);
  const fs::path dist_out = shared_dir("dp_memory_2ranks"), single_out = shared_dir("dp_memory_1proc");
  const std::vector<std::string> sets = {"train.epochs=1", "train.steps_per_epoch=1",
                                         "saved_tensors.default={scheme: actnn, bits: 2}"};
  run_training(tiny_config(data, dist_out, sets), quiet(g_world));
  std::vector<std::string> single_sets = sets;
  single_sets.push_back("data.batch_size=8");
  if (g_world->root()) run_training(tiny_config(data, single_out, single_sets), quiet(nullptr));
  g_world->comm->barrier("memory");
  if (!g_world->root()) return;
  const Json ranks = parse_json(read_text((dist_out / "memory_report_ranks.json").string()))["ranks"];
  const Json single = parse_json(read_text((single_out / "memory_report.json").string()))["totals"];
  ASSERT_EQ(ranks.size(), 2u);
  for (const Json& r : ranks) {
    EXPECT_EQ(r["batch_size"].get<int64_t>(), 8);
    EXPECT_GT(r["saved_bytes"].get<int64_t>(), 0);
    EXPECT_EQ(r["saved_bytes"].get<int64_t>(), single["saved_bytes"].get<int64_t>());
    EXPECT_EQ(r["allocator_saved_bytes"].get<int64_t>(), single["allocator_saved_bytes"].get<int64_t>());
  }
}

// GACT's measured refresh runs on each rank's own batch; rank 0's decision is broadcast, so every
// rank holds the same sensitivities and bits. Without the broadcast they differ (the control).
namespace {
// Forwards everything but the GACT broadcast (the control).
class WithoutGactBroadcast : public StepSync {
 public:
  explicit WithoutGactBroadcast(StepSync& s) : s_(s) {}
  void before_backward(int64_t l, int64_t g) override { s_.before_backward(l, g); }
  void after_backward() override { s_.after_backward(); }
  void abandon() override { s_.abandon(); }
  void after_store_refresh(SavedTensorStore&) override {}

 private:
  StepSync& s_;
};

// Whether every rank ends 3 steps of GACT (refreshing every step) with rank 0's table.
bool gact_tables_agree(bool broadcast) {
  const fs::path data = shared_data("dp_gact", 16, 8);
  Config c = tiny_config(data, shared_dir("dp_gact"),
                         {"saved_tensors.rules=[]", "saved_tensors.default={scheme: gact, avg_bits: 2, adapt_interval: 1, "
                          "tensors_per_refresh: 0}"});
  Session s = make_session(c, InputSpec{1, 12, 12, 10});
  broadcast_model(*g_world, *s.model);
  DataParallelStep step(*g_world, *s.model, c.distributed);
  WithoutGactBroadcast control(step);
  StepOptions o;
  o.sync = broadcast ? static_cast<StepSync*>(&step) : &control;
  o.global_count = 16;
  // Each rank its own 8 of the 16 samples.
  SyntheticBatch b = synthetic_batch(8, 1, 12, 12, 10, 100 + static_cast<uint64_t>(g_world->rank()));
  for (int64_t i = 0; i < 3; ++i) train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, i, o);
  std::string table;
  for (const TensorSensitivity& t : find_gact_stores(*s.policy).at(0)->tensors())
    table += fmt::format("{} {} {:.17g}\n", t.layer, t.bits, t.sensitivity);
  const std::vector<std::string> all = g_world->comm->gather(table, 0, "gact tables");
  std::vector<double> agree{g_world->root() && !table.empty() && all[0] == all[1] ? 1.0 : 0.0};
  sum_over_ranks(*g_world, agree, "gact verdict");
  return agree[0] > 0;
}
}  // namespace

TEST(DataParallel, GactBitsAreIdenticalOnEveryRank) {
  EXPECT_TRUE(gact_tables_agree(true));
  EXPECT_FALSE(gact_tables_agree(false));
}

// A rank that does not arrive makes the others' collective fail within the timeout, naming it.
TEST(DataParallel, ACollectiveTimesOutNamingTheMissingRank) {
  dist::CommunicatorOptions o;
  o.backend = "mpi";
  o.timeout_s = 1.0;
  auto comm = dist::make_communicator(o);
  if (comm->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3500));  // "hung"
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    float x = 1;
    comm->all_reduce_sum(&x, 1, "test sum");
  } catch (const dist::CommunicatorError& e) {
    message = e.what();
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  comm->mark_failed();  // the pending collective cannot be finished cleanly
  if (comm->rank() == 0) {
    EXPECT_NE(message.find("rank 0: test sum"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 1 did not answer"), std::string::npos) << message;
    EXPECT_NE(message.find("distributed.timeout_s = 1 s"), std::string::npos) << message;
    EXPECT_LT(waited, 1.0 + 5.0);  // the timeout plus the grace period for answers
  }
  g_world->comm->barrier("after the timeout test");
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  dist::CommunicatorOptions o;
  o.backend = "mpi";
  o.timeout_s = 120;
  DataParallel world;
  world.comm = dist::make_communicator(o);
  g_world = &world;
  // Only rank 0 reports (both run every test and must agree on the collectives).
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  // A failure on any rank fails the test.
  std::vector<double> failed{rc != 0 ? 1.0 : 0.0};
  sum_over_ranks(world, failed, "test result");
  return failed[0] > 0 ? 1 : 0;
}
