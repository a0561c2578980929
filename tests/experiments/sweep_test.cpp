// The sweep runner (experiments/lib/sweep_*.h): resuming, validation before any run, and a
// report computed from results.csv.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "experiments/lib/csv_table.h"
#include "experiments/lib/sweep_file.h"
#include "experiments/lib/sweep_report.h"
#include "experiments/lib/sweep_run.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/run_files.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

// A sweep directory holding the tiny base config and a sweep file over it.
fs::path sweep_dir(const std::string& name, const std::string& sweep_body) {
  static const fs::path data = make_idx_dataset("sweep", 64, 32);
  const fs::path dir = temp_dir("sweep_" + name);
  write_text(dir / "base.yaml", tiny_yaml(data, dir / "unused"));
  write_text(dir / "sweep.yaml", "name: " + name + "\nbase: base.yaml\n" + sweep_body);
  return dir;
}

const char* kGrid =
    "sets: [train.epochs=1, train.log_interval=2, \"saved_tensors.default={scheme: actnn, bits: 4}\"]\n"
    "scales: {small: [data.batch_size=16], paper: [data.batch_size=32]}\n"
    "axes:\n"
    "  - {name: bits, key: saved_tensors.default.bits, values: [2, 4]}\n"
    "points:\n"
    "  - {name: fp32, sets: [saved_tensors.default=fp32, \"saved_tensors.rules=[]\"]}\n"
    "seeds: [1]\n"
    "gradient_fidelity: 3\n";

// results.csv without the img/s column (a timing, measured anew by every execution).
std::string without_timing(const std::string& csv) {
  CsvTable t = parse_csv(csv, "results.csv");
  const size_t c = t.column("img_per_s", "results.csv");
  std::string out;
  for (auto row : std::vector<std::vector<std::string>>{t.header}) {
    row.erase(row.begin() + static_cast<long>(c));
    out += csv_line(row) + "\n";
  }
  for (auto row : t.rows) {
    row.erase(row.begin() + static_cast<long>(c));
    out += csv_line(row) + "\n";
  }
  return out;
}

}  // namespace

TEST(Sweep, PointsAreTheGridThenTheExtraPoints) {
  const fs::path dir = sweep_dir("points", kGrid);
  const SweepSpec s = load_sweep((dir / "sweep.yaml").string());
  const auto pts = s.points();
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_EQ(pts[0].id, "bits=2");
  EXPECT_EQ(pts[1].sets, std::vector<std::string>{"saved_tensors.default.bits=4"});
  EXPECT_EQ(pts[2].id, "fp32");
  SweepOptions o;
  o.out = (dir / "out").string();
  const auto runs = plan_sweep(s, o);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1].seed, 1u);
  EXPECT_EQ(runs[1].config.seed, 1u);
  EXPECT_EQ(runs[1].config.data.batch_size, 16);  // the small scale's override
  EXPECT_EQ(runs[1].config.saved_tensors.default_scheme.options.at("bits"), "4");
  EXPECT_TRUE(runs[2].config.saved_tensors.rules.empty());
  EXPECT_EQ(runs[2].config.saved_tensors.default_scheme.scheme, "fp32");
  o.scale = "paper";
  EXPECT_EQ(plan_sweep(s, o)[0].config.data.batch_size, 32);
}

// Killed after one run, then after one more, then finished (3 runs): the same results.csv (every column
// but the img/s timing) as a sweep run straight through; the report and plots are written only
// once every run is done.
TEST(Sweep, AnInterruptedSweepResumesToTheSameResults) {
  const fs::path dir = sweep_dir("resume", kGrid);
  const SweepSpec s = load_sweep((dir / "sweep.yaml").string());
  SweepOptions straight;
  straight.out = (dir / "straight").string();
  straight.quiet = true;
  const SweepOutcome a = run_sweep(s, straight);
  ASSERT_TRUE(a.complete);
  EXPECT_EQ(a.ran, 3);
  const std::string expected = read_text(dir / "straight" / "results.csv");

  SweepOptions killed = straight;
  killed.out = (dir / "killed").string();
  killed.stop_after_runs = 1;
  const SweepOutcome b1 = run_sweep(s, killed);
  EXPECT_FALSE(b1.complete);
  EXPECT_EQ(b1.ran, 1);
  EXPECT_FALSE(fs::exists(dir / "killed" / "report.md"));
  EXPECT_EQ(parse_csv(read_text(dir / "killed" / "results.csv"), "csv").rows.size(), 1u);
  const SweepOutcome b2 = run_sweep(s, killed);
  EXPECT_EQ(b2.done_before, 1);
  EXPECT_EQ(b2.ran, 1);
  killed.stop_after_runs = 0;
  const SweepOutcome b3 = run_sweep(s, killed);
  EXPECT_EQ(b3.done_before, 2);
  EXPECT_EQ(b3.ran, 1);
  ASSERT_TRUE(b3.complete);
  EXPECT_EQ(without_timing(read_text(dir / "killed" / "results.csv")), without_timing(expected));
  EXPECT_TRUE(fs::exists(dir / "killed" / "report.md"));

  // A finished sweep run again trains nothing and rewrites the same file.
  const std::string finished = read_text(dir / "killed" / "results.csv");
  const SweepOutcome c = run_sweep(s, killed);
  EXPECT_EQ(c.ran, 0);
  EXPECT_EQ(read_text(dir / "killed" / "results.csv"), finished);

  const CsvTable t = parse_csv(expected, "results.csv");
  ASSERT_EQ(t.rows.size(), 3u);
  const size_t saved = t.column("saved_bytes", "csv"), cos = t.column("grad_cosine", "csv");
  // 2-bit vs 4-bit ActNN vs FP32: the measured saved bytes grow.
  EXPECT_LT(std::stoll(t.rows[0][saved]), std::stoll(t.rows[1][saved]));
  EXPECT_LT(std::stoll(t.rows[1][saved]), std::stoll(t.rows[2][saved]));
  EXPECT_LT(std::stod(t.rows[0][cos]), 1.0);  // 2-bit: the gradient moves
  EXPECT_EQ(std::stod(t.rows[2][cos]), 1.0);  // fp32 point: the gradient is exact
}

TEST(Sweep, UnknownKeyInTheSweepFileIsNamed) {
  const fs::path dir = sweep_dir("unknown", std::string(kGrid) + "sedes: [1]\n");
  try {
    load_sweep((dir / "sweep.yaml").string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key 'sedes'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line"), std::string::npos) << e.what();
  }
  const fs::path dir2 = sweep_dir("unknown_axis", "axes:\n  - {name: a, kee: x, values: [1]}\n");
  EXPECT_THROW(load_sweep((dir2 / "sweep.yaml").string()), Error);
  // A plot of one axis in a two-axis sweep without a series would mix the other axis's points.
  const fs::path dir3 = sweep_dir("plot_axes",
                                  "axes:\n  - {name: a, key: train.epochs, values: [1]}\n"
                                  "  - {name: b, key: seed, values: [1]}\nplots:\n  - {x: a, y: final_test_acc}\n");
  EXPECT_THROW(load_sweep((dir3 / "sweep.yaml").string()), Error);
}

// A grid value the trainer rejects (batch size 0 in the second point), a config key that does
// not exist, and a scheme option out of range: each stops the sweep before any run, naming the
// point and the key.
TEST(Sweep, BadOverridesStopBeforeAnyRun) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"axes:\n  - {name: batch, key: data.batch_size, values: [16, 0]}\n", "data.batch_size"},
      {"points:\n  - {name: typo, sets: [train.epoch=1]}\n", "train.epoch"},
      {"sets: [\"saved_tensors.default={scheme: actnn, bits: 4}\"]\n"
       "axes:\n  - {name: bits, key: saved_tensors.default.bits, values: [2, 7]}\n",
       "'bits' is 7"},
  };
  int i = 0;
  for (const auto& [body, key] : cases) {
    const fs::path dir = sweep_dir("bad" + std::to_string(i++), body);
    const SweepSpec s = load_sweep((dir / "sweep.yaml").string());
    SweepOptions o;
    o.out = (dir / "out").string();
    try {
      run_sweep(s, o);
      FAIL() << "no error for " << body;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("point '"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "out" / "runs")) << "a run started before the error";
  }
}

// report.md's table is computed from results.csv: mean and sample std over seeds per point,
// accuracy in %, bytes in MiB, and the paper's number beside the point it belongs to.
TEST(Sweep, ReportIsComputedFromTheCsv) {
  const fs::path dir = sweep_dir("report", std::string(kGrid) +
                                               "paper: {source: \"Table 9\", metric: final_test_acc, "
                                               "values: {\"bits=4\": 91.5}}\n");
  const SweepSpec s = load_sweep((dir / "sweep.yaml").string());
  std::string csv = csv_line(results_csv_header(s)) + "\n";
  const CsvTable empty = parse_csv(csv, "h");
  auto row = [&](const std::string& point, const std::string& bits, int seed, double acc, int64_t saved) {
    std::vector<std::string> f(empty.header.size(), "0");
    f[empty.column("point", "h")] = point;
    f[empty.column("bits", "h")] = bits;
    f[empty.column("seed", "h")] = std::to_string(seed);
    f[empty.column("final_test_acc", "h")] = std::to_string(acc);
    f[empty.column("saved_bytes", "h")] = std::to_string(saved);
    f[empty.column("final_test_loss", "h")] = "nan";
    return csv_line(f) + "\n";
  };
  csv += row("bits=2", "2", 1, 0.90, 1048576) + row("bits=2", "2", 2, 0.92, 1048576) + row("bits=2", "2", 3, 0.94, 3 * 1048576);
  csv += row("bits=4", "4", 1, 0.5, 0);
  const std::string md = sweep_report_markdown(s, parse_csv(csv, "results.csv"), "small", {"x.png"});
  EXPECT_NE(md.find("| bits=2 | 3 | 92.00 ± 2.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("1.67 ± 1.15"), std::string::npos) << md;  // MiB: (1 + 1 + 3) / 3, sample std
  EXPECT_NE(md.find("| bits=4 | 1 | 50.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("91.50 |"), std::string::npos) << md;
  EXPECT_NE(md.find("Table 9"), std::string::npos) << md;
  EXPECT_NE(md.find("![x.png](x.png)"), std::string::npos) << md;
  EXPECT_NE(md.find("n/a"), std::string::npos) << md;  // the nan test loss
}
