// Sweeps given what a hostile (or hurried) user gives them: every case here once ended in a
// wrong results.csv reported as right, a crash, or a run retrained and deleted over and over.
// Each is now refused with one line naming the file, point or key, and a refused sweep leaves
// every byte of its directory as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "experiments/lib/csv_table.h"
#include "experiments/lib/dir_lock.h"
#include "experiments/lib/sweep_file.h"
#include "experiments/lib/sweep_run.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/tiny_config.h"
#include "tests/experiments/run_files.h"
#include "tests/support/errors.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

const fs::path& tiny_data() {
  static const fs::path data = make_idx_dataset("sweep_hostile", 64, 32);
  return data;
}

// A directory holding the tiny base config and sweep.yaml over it; returns the sweep file.
fs::path sweep_file(const std::string& name, const std::string& body) {
  const fs::path dir = temp_dir("sweep_hostile_" + name);
  write_text(dir / "base.yaml", tiny_yaml(tiny_data(), dir / "unused"));
  write_text(dir / "sweep.yaml", "name: " + name + "\nbase: base.yaml\n" + body);
  return dir / "sweep.yaml";
}

std::string load_error(const std::string& name, const std::string& body) {
  const fs::path f = sweep_file(name, body);
  return message_of([&] { load_sweep(f.string()); });
}

// Every file (its bytes) and directory under `dir`, to compare before and after a refused sweep.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> m;
  if (!fs::exists(dir)) return m;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    m[fs::relative(e.path(), dir).string()] = e.is_directory() ? "(directory)" : read_text(e.path());
  return m;
}

bool has(const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; }

SweepOptions quiet_out(const fs::path& sweep) {
  SweepOptions o;
  o.out = (sweep.parent_path() / "out").string();
  o.quiet = true;
  return o;
}

const char* kOnePoint = "sets: [train.epochs=1]\npoints:\n  - {name: p}\nseeds: [1]\n";

}  // namespace

// Points "a b" and "a_b" (or an axis value given twice) once shared one run directory: the
// second was taken as done by the first, and results.csv got two identical rows.
TEST(SweepHostile, TwoPointsInOneRunDirectoryAreRefusedAtParseTime) {
  std::string msg = load_error("names", "points:\n  - {name: \"a b\"}\n  - {name: a_b}\n");
  EXPECT_TRUE(has(msg, "sweep.yaml: points (line 4)")) << msg;
  EXPECT_TRUE(has(msg, "points 'a b' and 'a_b' would share the run directory runs/a_b")) << msg;

  msg = load_error("repeat", "axes:\n  - {name: lr, key: optimizer.lr, values: [0.1, 0.1]}\n");
  EXPECT_TRUE(has(msg, "sweep.yaml: axes[0].values (line 4)")) << msg;
  EXPECT_TRUE(has(msg, "value '0.1' is listed twice")) << msg;

  msg = load_error("labels", "axes:\n  - name: r\n    values: {\"x y\": [seed=1], x_y: [seed=2]}\n");
  EXPECT_TRUE(has(msg, "values 'x y' and 'x_y' would share the run directory name 'x_y'")) << msg;

  msg = load_error("dotdot", "points:\n  - {name: \"..\"}\n");
  EXPECT_TRUE(has(msg, "point '..' cannot be a directory name")) << msg;
}

// A finished sweep whose file is then edited (train.epochs 1 -> 2) once reported the 1-epoch runs
// as the new sweep's ("1 done before"). Now it is refused, naming the point, the changed key and
// --rerun, and writes nothing; --rerun replaces the run.
TEST(SweepHostile, AnEditedSweepFileDoesNotReuseTheOldRuns) {
  const fs::path f = sweep_file("edited", kOnePoint);
  const SweepOptions o = quiet_out(f);
  ASSERT_EQ(run_sweep(load_sweep(f.string()), o).ran, 1);

  write_text(f, read_text(f).replace(read_text(f).find("epochs=1"), 8, "epochs=2"));
  const SweepSpec edited = load_sweep(f.string());
  const auto before = snapshot(o.out);
  const std::string msg = message_of([&] { run_sweep(edited, o); });
  EXPECT_TRUE(has(msg, f.string() + ": point 'p' seed 1 (run directory " + o.out + "/runs/p/seed1)")) << msg;
  EXPECT_TRUE(has(msg, "train.epochs: 1 -> 2")) << msg;
  EXPECT_TRUE(has(msg, "--rerun")) << msg;
  EXPECT_EQ(snapshot(o.out), before) << "a refused sweep changed its directory";

  SweepOptions rerun = o;
  rerun.rerun = true;
  const SweepOutcome r = run_sweep(edited, rerun);
  EXPECT_EQ(r.ran, 1);
  EXPECT_TRUE(r.complete);
  const CsvTable t = parse_csv(read_text(fs::path(o.out) / "results.csv"), "results.csv");
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0][t.column("epochs", "results.csv")], "2");
  // Now the run matches the file: a plain rerun reuses it.
  const SweepOutcome again = run_sweep(edited, o);
  EXPECT_EQ(again.done_before, 1);
  EXPECT_EQ(again.ran, 0);
}

// Two sweeps into one directory once both trained every run, each epoch written twice.
TEST(SweepHostile, ASecondSweepOnTheSameDirectoryIsRefused) {
  const fs::path f = sweep_file("locked", kOnePoint);
  const SweepOptions o = quiet_out(f);
  fs::create_directories(o.out);
  const DirectoryLock first(o.out, "--out");  // as a sweep running in this directory holds it
  const auto before = snapshot(o.out);
  const std::string msg = message_of([&] { run_sweep(load_sweep(f.string()), o); });
  EXPECT_TRUE(has(msg, "--out " + o.out + " is in use by another packrat process (pid " +
                           std::to_string(::getpid()) + ")"))
      << msg;
  EXPECT_EQ(snapshot(o.out), before);
}

// A point that failed (here: its data.root does not exist yet) once was not named, and every
// rerun of the sweep retrained it, deleted its files and failed again. Now the error names the
// point and its run directory, the failure is recorded beside the kept files, and a rerun is
// refused until --rerun retries it.
TEST(SweepHostile, AFailedPointIsNamedKeptAndRetriedOnlyWithRerun) {
  const fs::path f = sweep_file("failed", "");
  const fs::path later = f.parent_path() / "later_data";
  write_text(f, read_text(f) + "sets: [train.epochs=1]\npoints:\n  - {name: good}\n  - {name: bad, sets: [\"data.root=" +
                    later.string() + "\"]}\nseeds: [1]\n");
  const SweepSpec s = load_sweep(f.string());
  const SweepOptions o = quiet_out(f);
  const std::string bad_dir = o.out + "/runs/bad/seed1";
  std::string msg = message_of([&] { run_sweep(s, o); });
  EXPECT_TRUE(has(msg, "point 'bad' seed 1 failed (run directory " + bad_dir + ", kept)")) << msg;
  EXPECT_TRUE(has(msg, "--rerun")) << msg;
  // The run checks its data before it writes anything, so the record is the marker with the cause.
  EXPECT_TRUE(has(read_text(fs::path(bad_dir) / "sweep_failed"), later.string()))
      << read_text(fs::path(bad_dir) / "sweep_failed");

  const auto before = snapshot(o.out);
  msg = message_of([&] { run_sweep(s, o); });
  EXPECT_TRUE(has(msg, "point 'bad' seed 1 (run directory " + bad_dir + ") failed in an earlier sweep")) << msg;
  EXPECT_TRUE(has(msg, "--rerun")) << msg;
  EXPECT_EQ(snapshot(o.out), before) << "the failed run was retrained or its files removed";

  fs::create_directory_symlink(tiny_data(), later);  // the cause, fixed
  SweepOptions rerun = o;
  rerun.rerun = true;
  const SweepOutcome r = run_sweep(s, rerun);
  EXPECT_EQ(r.done_before, 1);
  EXPECT_EQ(r.ran, 1);
  EXPECT_TRUE(r.complete);
  EXPECT_FALSE(fs::exists(fs::path(bad_dir) / "sweep_failed"));
}

// A plot's y column was checked only after every run had trained, and a paper.metric typo was
// never: the report compared a column with nothing.
TEST(SweepHostile, TyposInPlotColumnsAndPaperMetricAreRefusedAtParseTime) {
  const std::string axis = "axes:\n  - {name: bits, key: seed, values: [1, 2]}\n";
  std::string msg = load_error("ploty", axis + "plots:\n  - {x: bits, y: final_tset_acc}\n");
  EXPECT_TRUE(has(msg, "sweep.yaml: plots[0].y (line 6): 'final_tset_acc' is not a results.csv column")) << msg;

  msg = load_error("metric", axis + "paper: {source: T1, metric: final_test_accuracy}\n");
  EXPECT_TRUE(has(msg, "sweep.yaml: paper.metric (line 5): 'final_test_accuracy' is not a results.csv column")) << msg;

  // The fidelity columns exist only when the sweep measures fidelity.
  msg = load_error("nofid", axis + "plots:\n  - {x: bits, y: grad_cosine}\n");
  EXPECT_TRUE(has(msg, "'grad_cosine' is not a results.csv column")) << msg;
  EXPECT_EQ(load_error("fid", axis + "gradient_fidelity: 3\nplots:\n  - {x: bits, y: grad_cosine}\n"), "(no error)");
}

// A 32-axis grid once allocated every point (std::bad_alloc); a list used as a key was yaml-cpp's
// "bad conversion" (exit 1); --out naming a file was a raw filesystem error.
TEST(SweepHostile, HugeGridsListKeysAndAFileAsOutAreRefused) {
  auto axes = [](int n) {
    std::string a = "axes:\n";
    for (int i = 0; i < n; ++i) a += "  - {name: a" + std::to_string(i) + ", key: seed, values: [1, 2]}\n";
    return a;
  };
  std::string msg = load_error("grid14", axes(14));
  ASSERT_TRUE(has(msg, "sweep.yaml: axes (line 4): the grid has 16384 points (2 x 2")) << msg;
  EXPECT_TRUE(has(msg, "at most 10000 runs")) << msg;
  msg = load_error("grid32", axes(32));
  EXPECT_TRUE(has(msg, "the grid has 4294967296 points")) << msg;
  msg = load_error("grid80", axes(80));
  EXPECT_TRUE(has(msg, "the grid has over 2^64 points")) << msg;
  msg = load_error("seeds", "points:\n  - {name: p}\n  - {name: q}\nseeds: [" + [] {
    std::string s;
    for (int i = 0; i < 5001; ++i) s += (i ? ", " : "") + std::to_string(i);
    return s;
  }() + "]\n");
  EXPECT_TRUE(has(msg, "2 points x 5001 seeds = 10002 runs")) << msg;

  msg = load_error("listkey", "[a, b]: 1\n");
  EXPECT_TRUE(has(msg, "sweep.yaml: the sweep file (line 3): a key must be a single value")) << msg;
  msg = load_error("listlabel", "axes:\n  - name: r\n    values: {[x]: [seed=1]}\n");
  EXPECT_TRUE(has(msg, "sweep.yaml: axes[0].values (line 5): a key must be a single value")) << msg;
  msg = load_error("paperkey", "points:\n  - {name: p}\npaper: {source: T, metric: final_test_acc, values: {[p]: 1}}\n");
  EXPECT_TRUE(has(msg, "paper.values (line 5): a key must be a single value")) << msg;

  const fs::path f = sweep_file("outfile", kOnePoint);
  const fs::path file = f.parent_path() / "results_file";
  write_text(file, "mine\n");
  SweepOptions o;
  o.out = file.string();
  msg = message_of([&] { run_sweep(load_sweep(f.string()), o); });
  EXPECT_TRUE(has(msg, "--out " + file.string() + " is a file, not a directory")) << msg;
  EXPECT_EQ(read_text(file), "mine\n");
}
