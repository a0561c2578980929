#include "experiments/lib/cli.h"

#include <fmt/ranges.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "experiments/lib/config.h"
#include "experiments/lib/distributed_run.h"
#include "experiments/lib/gradient_fidelity.h"
#include "experiments/lib/memory_plan.h"
#include "experiments/lib/output_dir.h"
#include "experiments/lib/paired_benchmark.h"
#include "experiments/lib/run.h"
#include "experiments/lib/tools.h"

namespace packrat {

std::string trainer_usage() {
  return "usage: trainer --config FILE [--set key=value ...] [--resume RUN_DIR] [--memory-report-only]\n"
         "               [--benchmark STEPS [--vs key=value ...]] [--find-max-batch BYTES] [--gradient-fidelity N] [--stop-after-epoch N]\n"
         "               [--overwrite] [--memory-timeline]\n"
         "  --config FILE          YAML experiment config (configs/quickstart.yaml)\n"
         "  --set key=value        override any config key, e.g. --set data.batch_size=256 (repeatable)\n"
         "  --resume RUN_DIR       continue the run in RUN_DIR from its latest checkpoint\n"
         "                         (its config.yaml unless --config is given)\n"
         "  --memory-report-only   two training steps on synthetic inputs, the second reported (the first allocates\n"
         "                         the optimizer's state); write memory_report.json and exit\n"
         "  --memory-timeline      --memory-report-only, recording the device allocator's every event over the\n"
         "                         step: memory_timeline.csv and .png (bytes by tag, forward / backward / update)\n"
         "  --benchmark STEPS      time STEPS training steps on synthetic inputs; last line is JSON\n"
         "  --vs key=value         with --benchmark: time the config against itself with these overrides (repeatable),\n"
         "                         the two sessions' steps in turn in one process; JSON of both and speed_vs\n"
         "                         (e.g. --vs 'saved_tensors={default: fp32}': compression's cost in speed)\n"
         "  --find-max-batch BYTES largest batch whose training step fits in BYTES (e.g. 2G, 512M)\n"
         "  --gradient-fidelity N  on the first training batch, N draws of the scheme's noise against the FP32\n"
         "                         gradient: per-parameter cosine, relative bias and variance (table,\n"
         "                         gradient_fidelity.json and .png in output.dir)\n"
         "  --stop-after-epoch N   stop after N epochs (a checkpoint is written), as if interrupted\n"
         "  --overwrite            replace the earlier run in output.dir (its checkpoints, metrics and log);\n"
         "                         without it a fresh run refuses a directory that holds one\n";
}

namespace {
int run_mode(const TrainerArgs& a, const Config& c, DataParallel* dp, const Config* vs);
int gradient_fidelity_command(const TrainerArgs& a, const Config& c);

int64_t parse_int(const std::string& s, const std::string& flag) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  PACKRAT_CHECK(ec == std::errc() && end == s.data() + s.size() && v > 0, "{}: expected a positive integer, got '{}'",
                flag, s);
  return v;
}
}  // namespace

int64_t parse_byte_size(const std::string& s, const std::string& flag) {
  PACKRAT_CHECK(!s.empty(), "{}: expected a byte count such as 2G, 512M or 1000000", flag);
  int64_t mult = 1;
  std::string digits = s;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
  if (last == 'K' || last == 'M' || last == 'G') {
    mult = last == 'K' ? 1024 : last == 'M' ? 1024 * 1024 : int64_t{1024} * 1024 * 1024;
    digits = s.substr(0, s.size() - 1);
  }
  int64_t v = 0;
  try {
    v = parse_int(digits, flag);
  } catch (const Error&) {
    fail("{}: expected a byte count such as 2G, 512M or 1000000, got '{}'", flag, s);
  }
  // 2^62 bytes (4 EiB) is more than any machine holds, and far from int64 overflow.
  constexpr int64_t kMaxBytes = int64_t{1} << 62;
  PACKRAT_CHECK(v <= kMaxBytes / mult, "{}: {} is more than 4 EiB (2^62 bytes); give a byte count such as 2G or 512M",
                flag, s);
  return v * mult;
}

TrainerArgs parse_trainer_args(const std::vector<std::string>& argv) {
  TrainerArgs a;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& f = argv[i];
    auto value = [&]() -> const std::string& {
      PACKRAT_CHECK(i + 1 < argv.size(), "{} needs a value\n{}", f, trainer_usage());
      return argv[++i];
    };
    if (f == "--config") a.config = value();
    else if (f == "--set") a.sets.push_back(value());
    else if (f == "--resume") {
      a.resume = value();
      PACKRAT_CHECK(!a.resume.empty(), "--resume: needs a run directory, got an empty string");
    }
    else if (f == "--memory-report-only") a.memory_report_only = true;
    else if (f == "--memory-timeline") a.memory_timeline = a.memory_report_only = true;
    else if (f == "--benchmark") a.benchmark_steps = parse_int(value(), f);
    else if (f == "--vs") a.vs_sets.push_back(value());
    else if (f == "--find-max-batch") a.max_batch_bytes = parse_byte_size(value(), f);
    else if (f == "--gradient-fidelity") a.gradient_fidelity = parse_int(value(), f);
    else if (f == "--stop-after-epoch") a.stop_after_epoch = parse_int(value(), f);
    else if (f == "--overwrite") a.overwrite = true;
    else if (f == "--help" || f == "-h") a.help = true;
    else fail("unknown argument '{}'\n{}", f, trainer_usage());
  }
  if (a.help) return a;
  PACKRAT_CHECK(!a.config.empty() || !a.resume.empty(), "--config FILE is required\n{}", trainer_usage());
  const int modes = a.memory_report_only + (a.benchmark_steps > 0) + (a.max_batch_bytes > 0) + !a.resume.empty() +
                    (a.gradient_fidelity > 0);
  PACKRAT_CHECK(modes <= 1, "--resume, --memory-report-only, --benchmark, --find-max-batch and --gradient-fidelity "
                "exclude each other");
  PACKRAT_CHECK(a.vs_sets.empty() || a.benchmark_steps > 0,
                "--vs key=value: applies to --benchmark STEPS only (a paired benchmark)\n{}", trainer_usage());
  PACKRAT_CHECK(a.gradient_fidelity != 1, "--gradient-fidelity: needs at least 2 draws to estimate a variance, got 1");
  PACKRAT_CHECK(a.gradient_fidelity <= kMaxFidelityDraws,
                "--gradient-fidelity: {} draws is more than the {} allowed (each draw is a backward pass; a sweep "
                "file's gradient_fidelity has the same cap)",
                a.gradient_fidelity, kMaxFidelityDraws);
  PACKRAT_CHECK(!a.overwrite || modes == 0 || a.gradient_fidelity > 0,
                "--overwrite applies to a fresh training run or --gradient-fidelity only (not with --resume, "
                "--memory-report-only, --benchmark or --find-max-batch)");
  return a;
}

int run_trainer(const TrainerArgs& a) {
  if (a.help) {
    std::fputs(trainer_usage().c_str(), stdout);
    return 0;
  }
  std::vector<std::string> sets = a.sets;
  std::string config_path = a.config;
  if (!a.resume.empty()) {
    const std::string run = expand_home(a.resume, "--resume");
    PACKRAT_CHECK(std::filesystem::is_directory(run), "--resume {}: no such run directory", a.resume);
    if (config_path.empty()) config_path = (std::filesystem::path(run) / "config.yaml").string();
    sets.push_back("output.dir=" + run);
  }
  // The run's own config.yaml may come from an earlier packrat (load_run_config).
  Config c = a.config.empty() ? load_run_config(config_path, sets) : load_config(config_path, sets);
  // As a shell would: a quoted '~/runs/x' made a directory named '~' in the working directory.
  c.output.dir = expand_home(c.output.dir, "output.dir");
  c.data.root = expand_home(c.data.root, "data.root");
  // A resume rewrites its own config.yaml with the resolved config; a fresh run must not write
  // over the user's config file.
  if (a.resume.empty()) check_not_a_run_file(c.output.dir, config_path);
  // --vs: the config again with the overrides on top, its step timed in turn with c's.
  std::optional<Config> vs;
  if (!a.vs_sets.empty()) {
    PACKRAT_CHECK(!data_parallel_requested(), "--vs: a paired benchmark runs its two configs in one process: run it "
                  "without mpirun");
    std::vector<std::string> vs_sets = sets;
    vs_sets.insert(vs_sets.end(), a.vs_sets.begin(), a.vs_sets.end());
    try {
      vs = load_config(config_path, vs_sets);
    } catch (const Error& e) {  // c loaded: the error is in the --vs overrides
      fail("--vs: {}", e.what());
    }
  }
  // Under mpirun: one rank of a data-parallel run (distributed_run.h).
  std::unique_ptr<DataParallel> dp;
  if (data_parallel_requested()) {
    PACKRAT_CHECK(!a.memory_report_only && a.max_batch_bytes == 0 && a.gradient_fidelity == 0,
                  "--memory-report-only, --find-max-batch and --gradient-fidelity measure one process: run them "
                  "without mpirun (a data-parallel run writes every rank's memory in memory_report_ranks.json)");
    PACKRAT_CHECK(c.memory.plan != "auto",
                  "{}: memory.plan: auto profiles one process: plan without mpirun (trainer --memory-report-only "
                  "prints the plan), then give the data-parallel run the chosen level", c.source);
    Config resolved;
    dp = start_data_parallel(c, resolved);
    c = resolved;
  }
  try {
    return run_mode(a, c, dp.get(), vs ? &*vs : nullptr);
  } catch (...) {
    if (dp) dp->comm->mark_failed();
    throw;
  }
}

namespace {
// One mode of the trainer for a loaded config (on one data-parallel rank when dp is set).
int run_mode(const TrainerArgs& a, const Config& config, DataParallel* dp, const Config* vs) {
  if (config.memory.plan == "auto" && a.max_batch_bytes > 0) {  // batch and plan searched together
    const PlannedMaxBatch r = plan_max_batch(config, a.max_batch_bytes);
    PACKRAT_CHECK(r.batch_size > 0, "--find-max-batch: not even batch 1 fits in {} bytes under any option of memory.plan: auto",
                  a.max_batch_bytes);
    for (const auto& [option, batch] : r.per_option)
      std::printf("%-10s %s\n", option.c_str(), batch < 0 ? "cannot run here" : std::to_string(batch).c_str());
    std::printf("{\"max_batch_size\": %lld, \"peak_bytes\": %lld, \"limit\": %lld, \"plan\": \"%s\"}\n",
                static_cast<long long>(r.batch_size), static_cast<long long>(r.peak_bytes),
                static_cast<long long>(a.max_batch_bytes), r.chosen.c_str());
    return 0;
  }
  // --vs: before memory.plan: auto would profile its options (benchmark_pair refuses it).
  if (a.benchmark_steps > 0 && vs) {
    const PairedBenchmark p = benchmark_pair(config, *vs, a.benchmark_steps);
    spdlog::info("{} steps of batch {} on {} in turn with {} of the config with {}: {:.1f} against {:.1f} img/s "
                 "(synthetic inputs of the data's shape)", p.config.steps, p.config.batch_size, p.config.device,
                 p.vs.steps, fmt::join(a.vs_sets, " "), p.config.img_per_s, p.vs.img_per_s);
    std::printf("%s\n", p.json().dump().c_str());
    return 0;
  }
  // memory.plan: auto: the chosen option replaces the config's storage before anything runs.
  std::optional<MemoryPlan> plan;
  if (config.memory.plan == "auto") {
    const bool trains = !a.memory_report_only && a.benchmark_steps == 0 && a.max_batch_bytes == 0 && a.gradient_fidelity == 0;
    if (trains) {  // a run the directory refuses is refused before the profile's steps, not after
      check_output_outside_data(config);
      check_output_dir(config.output.dir, !a.resume.empty(), a.overwrite);
    }
    plan = plan_memory(config);
    std::fputs(plan->table().c_str(), stdout);
  }
  const Config c = plan ? with_option(config, plan->overrides) : config;
  if (a.memory_report_only) {
    const DirectoryLock lock = lock_output_dir(c.output.dir);
    MemoryTimeline timeline;
    const MemoryReport r = memory_report_only(c, a.memory_timeline ? &timeline : nullptr);
    std::fputs(memory_report_table(r).c_str(), stdout);
    spdlog::info("wrote {}/memory_report.json", c.output.dir);
    if (a.memory_timeline) spdlog::info("wrote {}/memory_timeline.csv and memory_timeline.png", c.output.dir);
    return 0;
  }
  if (a.benchmark_steps > 0) {
    const BenchmarkResult r = benchmark(c, a.benchmark_steps, dp);
    if (dp && !dp->root()) return 0;
    spdlog::info("{} steps of batch {} on {} in {:.2f} s (synthetic inputs of the data's shape)", r.steps, r.batch_size,
                 r.device, r.seconds);
    std::printf("%s\n", r.json().dump().c_str());
    return 0;
  }
  if (a.max_batch_bytes > 0) {
    const MaxBatchResult r = find_max_batch(c, a.max_batch_bytes);
    PACKRAT_CHECK(r.batch_size > 0, "--find-max-batch: not even batch 1 fits in {} bytes", r.limit);
    std::printf("max batch size %lld fits in %lld bytes: peak %lld bytes (%lld trials on synthetic inputs of the data's shape)\n",
                static_cast<long long>(r.batch_size), static_cast<long long>(r.limit),
                static_cast<long long>(r.peak_bytes), static_cast<long long>(r.trials));
    std::printf("{\"max_batch_size\": %lld, \"peak_bytes\": %lld, \"limit\": %lld}\n", static_cast<long long>(r.batch_size),
                static_cast<long long>(r.peak_bytes), static_cast<long long>(r.limit));
    return 0;
  }
  if (a.gradient_fidelity > 0) return gradient_fidelity_command(a, c);
  RunOptions o;
  o.resume = !a.resume.empty();
  o.overwrite = a.overwrite;
  o.stop_after_epoch = a.stop_after_epoch;
  o.dp = dp;
  o.log_file = true;
  // For the life of the process, before anything in the directory is written or removed; rank 0
  // alone writes the run directory (and holds its lock).
  check_output_outside_data(c);  // before the lock makes the directory
  DirectoryLock lock;
  if (!dp || dp->root()) lock = lock_output_dir(c.output.dir);
  // Written with config.yaml once the run's checks pass: a refused run leaves the directory as it was.
  if (plan) o.extra_files.emplace_back("plan.json", plan->json().dump(2) + "\n");
  run_training(c, o);
  return 0;
}

// --gradient-fidelity N: refused as a fresh run is where an earlier run (or an earlier
// measurement) would be overwritten; with --overwrite the earlier run's files are removed once
// the measurement has been written.
int gradient_fidelity_command(const TrainerArgs& a, const Config& c) {
  check_fidelity_compares_a_scheme(c);
  check_output_outside_data(c);
  const DirectoryLock lock = lock_output_dir(c.output.dir);
  const std::vector<std::string> outputs = {"gradient_fidelity.json", "gradient_fidelity.png"};
  const auto earlier = check_measurement_dir(c.output.dir, outputs, a.overwrite, "--gradient-fidelity");
  const FidelityReport r = gradient_fidelity_mode(c, a.gradient_fidelity);
  if (!earlier.empty()) {  // --overwrite: the new measurement is written, the rest of the earlier run goes
    remove_run_files(c.output.dir, outputs);
    spdlog::warn("output.dir {}: --overwrite: removed the earlier run", c.output.dir);
  }
  std::fputs(r.table().c_str(), stdout);
  spdlog::info("wrote {}/gradient_fidelity.json", c.output.dir);
  return 0;
}

}  // namespace

}  // namespace packrat
