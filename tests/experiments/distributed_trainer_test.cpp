// The trainer under mpiexec (2 ranks, --oversubscribe): resuming a data-parallel run, a rank killed
// mid-epoch, configs that differ between ranks, and a batch that does not split. Skipped, with the
// reason, in a build without MPI. (The numerical equivalence tests run inside the ranks: tests/mpi/.)
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "distributed/communicator.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/json.h"
#include "experiments/lib/safetensors.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/run_files.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

fs::path trainer_binary() { return fs::read_symlink("/proc/self/exe").parent_path() / "trainer"; }

#define SKIP_WITHOUT_MPI()                                                                              \
  if (!dist::built_with_mpi()) GTEST_SKIP() << "built without MPI (PACKRAT_MPI=OFF or no MPI found)"; \
  ASSERT_TRUE(fs::exists(trainer_binary())) << trainer_binary() << " is not built"

// "mpiexec -np 2 ... " with the options every test needs (root in CI containers, 2 cores).
std::string mpiexec(int ranks = 2) {
  return std::string(PACKRAT_MPIEXEC) + " -np " + std::to_string(ranks) +
         " --oversubscribe --allow-run-as-root --bind-to none -x OMP_WAIT_POLICY=passive";
}

// A config file for the fixture data, written into dir.
fs::path write_config(const fs::path& dir, const fs::path& data, const fs::path& out, const std::string& extra = "",
                      const std::string& file = "dp.yaml") {
  const fs::path cfg = dir / file;
  std::ofstream(cfg) << tiny_yaml(data, out) << extra;
  return cfg;
}

// The pid of the trainer process of `rank` whose command line mentions `marker`, or -1.
pid_t find_rank(const std::string& marker, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_text(e.path() / "cmdline"), env = read_text(e.path() / "environ");
    for (char& ch : cmd)
      if (ch == '\0') ch = ' ';
    if (cmd.find("trainer") == std::string::npos || cmd.find(marker) == std::string::npos) continue;
    if (cmd.rfind("sh ", 0) == 0) continue;  // the wrapper shell
    if (env.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) return std::stoi(name);
  }
  return -1;
}

}  // namespace

// --stop-after-epoch 1, then --resume, under mpiexec: the same final weights as the run that was
// not interrupted (every rank reloads rank 0's checkpoint; the shards of epoch 2 are the same).
TEST(DistributedTrainer, ResumeContinuesAsTheUninterruptedRun) {
  SKIP_WITHOUT_MPI();
  const fs::path dir = temp_dir("dp_resume"), data = make_idx_dataset("dp_resume", 48, 8);
  const fs::path whole = dir / "whole", parts = dir / "parts";
  const std::string extra = "distributed: {sync_batchnorm: true, timeout_s: 60}\n";
  const std::string cfg_whole = write_config(dir, data, whole, extra, "whole.yaml").string();
  const std::string cfg_parts = write_config(dir, data, parts, extra, "parts.yaml").string();
  const std::string run = mpiexec() + " " + trainer_binary().string() + " --set train.epochs=2 --set data.limit_train=48";
  ASSERT_EQ(std::system((run + " --config " + cfg_whole + " > " + (dir / "whole.txt").string() +
                         " 2>&1").c_str()), 0) << read_text(dir / "whole.txt");
  ASSERT_EQ(std::system((run + " --config " + cfg_parts + " --stop-after-epoch 1 > " + (dir / "p1.txt").string() +
                         " 2>&1").c_str()), 0) << read_text(dir / "p1.txt");
  ASSERT_EQ(std::system((mpiexec() + " " + trainer_binary().string() + " --resume " + parts.string() + " > " +
                         (dir / "p2.txt").string() + " 2>&1").c_str()), 0) << read_text(dir / "p2.txt");
  EXPECT_NE(read_text(dir / "p2.txt").find("resumed from"), std::string::npos) << read_text(dir / "p2.txt");
  const SafetensorsFile a = read_safetensors(checkpoint_path(whole.string(), 2));
  const SafetensorsFile b = read_safetensors(checkpoint_path(parts.string(), 2));
  int compared = 0;
  for (const auto& [name, t] : a.tensors) {
    if (name.rfind("model.", 0) != 0 || t.dtype() != DType::f32) continue;
    ASSERT_TRUE(b.find(name)) << name;
    EXPECT_EQ(t.to_vector(), b.find(name)->to_vector()) << name;
    ++compared;
  }
  EXPECT_GT(compared, 50);
  // Rank 0 wrote the run directory: one metrics row per epoch, the per-rank memory table.
  EXPECT_TRUE(fs::exists(parts / "memory_report_ranks.json"));
  std::ifstream csv(parts / "metrics.csv");
  int lines = 0;
  for (std::string l; std::getline(csv, l);) ++lines;
  EXPECT_EQ(lines, 3);  // header + 2 epochs
}

// Rank 1 is killed (SIGKILL) in the middle of training (mpiexec --enable-recovery, so that the launcher
// does not end the survivors itself): rank 0 stops within distributed.timeout_s
// (plus the grace period in which it asks who is missing) with a message naming rank 1, exit code
// 2, and the last checkpoint it wrote is intact.
TEST(DistributedTrainer, AKilledRankEndsTheRunWithExitCode2AndAnIntactCheckpoint) {
  SKIP_WITHOUT_MPI();
  const fs::path dir = temp_dir("dp_kill"), data = make_idx_dataset("dp_kill", 64, 8);
  const fs::path out = dir / "out";
  const fs::path cfg = write_config(dir, data, out, "distributed: {timeout_s: 2}\n");
  // Each rank runs inside a shell that records its exit code (mpiexec reports only one).
  // --enable-recovery: without it mpiexec itself ends every rank by a signal as soon as one dies.
  const std::string cmd = mpiexec() + " --enable-recovery sh -c '" + trainer_binary().string() + " --config " + cfg.string() +
                          " --set train.epochs=200 2> " + (dir / "err_").string() +
                          "$OMPI_COMM_WORLD_RANK.txt; echo $? > " + (dir / "exit_").string() +
                          "$OMPI_COMM_WORLD_RANK' > " + (dir / "mpiexec.txt").string() + " 2>&1";
  std::thread launcher([&] { std::system(cmd.c_str()); });
  // Mid-epoch: once the first checkpoint exists, the run is in its second epoch.
  const auto first = fs::path(checkpoint_path(out.string(), 1));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(first) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const pid_t victim = find_rank(cfg.string(), 1);
  ASSERT_GT(victim, 0) << "rank 1's trainer was not found";
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  launcher.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(seconds, 2.0 + 5.0 + 5.0) << "timeout 2 s, grace up to 5 s, start-up slack";
  EXPECT_EQ(read_text(dir / "exit_0"), "2\n") << read_text(dir / "err_0.txt");
  EXPECT_EQ(read_text(dir / "exit_1"), "137\n");  // 128 + SIGKILL
  const std::string err = read_text(dir / "err_0.txt");
  EXPECT_NE(err.find("rank 1 did not answer"), std::string::npos) << err;
  EXPECT_NE(err.find("distributed.timeout_s = 2 s"), std::string::npos) << err;
  // The last checkpoint is complete and loads.
  const auto last = latest_checkpoint(out.string());
  ASSERT_TRUE(last.has_value());
  const SafetensorsFile f = read_safetensors(*last);
  EXPECT_TRUE(f.find("model.fc.weight"));
}

// Ranks started with different --set values: every rank stops before training, naming rank 1
// and the line of the resolved config that differs.
TEST(DistributedTrainer, DifferentConfigsOnTheRanksAreNamed) {
  SKIP_WITHOUT_MPI();
  const fs::path dir = temp_dir("dp_mismatch"), data = make_idx_dataset("dp_mismatch", 32, 8);
  const fs::path cfg = write_config(dir, data, dir / "out");
  const std::string t = trainer_binary().string() + " --config " + cfg.string();
  const std::string cmd = std::string(PACKRAT_MPIEXEC) + " --oversubscribe --allow-run-as-root --bind-to none -np 1 " +
                          t + " : -np 1 " + t + " --set optimizer.lr=0.2 > " + (dir / "out.txt").string() + " 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string out = read_text(dir / "out.txt");
  EXPECT_NE(out.find("the ranks resolved different configs"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 (line"), std::string::npos) << out;
  EXPECT_NE(out.find("lr: 0.2"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "out" / "checkpoints"));
}

TEST(DistributedTrainer, AGlobalBatchThatDoesNotSplitNamesTheKey) {
  SKIP_WITHOUT_MPI();
  const fs::path dir = temp_dir("dp_split"), data = make_idx_dataset("dp_split", 32, 8);
  const fs::path cfg = write_config(dir, data, dir / "out");
  const std::string cmd = mpiexec() + " sh -c '" + trainer_binary().string() + " --config " + cfg.string() +
                          " --set data.batch_size=15; echo $? > " + (dir / "exit_").string() +
                          "$OMPI_COMM_WORLD_RANK' > " + (dir / "out.txt").string() + " 2>&1";
  std::system(cmd.c_str());
  EXPECT_EQ(read_text(dir / "exit_0"), "2\n");
  EXPECT_EQ(read_text(dir / "exit_1"), "2\n");
  const std::string out = read_text(dir / "out.txt");
  EXPECT_NE(out.find("data.batch_size is 15, which does not split evenly over 2 data-parallel ranks"),
            std::string::npos) << out;
}

// `trainer --benchmark` under mpiexec reports how much of the gradient all-reduce started during
// the backward and how much had completed when it ended (the part hidden behind it), and with
// distributed.overlap: false none of either.
TEST(DistributedTrainer, TheBenchmarkCountsTheReductionHiddenBehindTheBackward) {
  SKIP_WITHOUT_MPI();
  const fs::path dir = temp_dir("dp_bench"), data = make_idx_dataset("dp_bench", 32, 8);
  const fs::path cfg = write_config(dir, data, dir / "out");
  auto last_json = [&](const std::string& overlap) {
    const fs::path out = dir / ("bench_" + overlap + ".txt");
    const std::string cmd = mpiexec() + " " + trainer_binary().string() + " --config " + cfg.string() +
                            " --benchmark 2 --set distributed.bucket_bytes=4096 --set distributed.overlap=" + overlap +
                            " --set output.dir=" + (dir / ("out_" + overlap)).string() + " > " + out.string() + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << read_text(out);
    std::istringstream lines(read_text(out));
    std::string line, json;
    while (std::getline(lines, line))
      if (line.starts_with("{")) json = line;
    return parse_json(json, "benchmark output");
  };
  const Json on = last_json("true"), off = last_json("false");
  EXPECT_EQ(on["started_in_backward"].get<double>(), 1.0);
  const double hidden = on["completed_in_backward"].get<double>();
  EXPECT_GE(hidden, 0.0);
  // Usually below 1 (the last bucket, the first layers', is still in flight when the backward ends),
  // but a fast all-reduce can finish it first: the bound is all a timing can promise.
  EXPECT_LE(hidden, 1.0);
  EXPECT_EQ(off["started_in_backward"].get<double>(), 0.0);
  EXPECT_EQ(off["completed_in_backward"].get<double>(), 0.0);
}
