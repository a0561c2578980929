#pragma once
// A sweep file (YAML): a base trainer config, --set overrides for every point and per scale, a
// grid of axes (their cartesian product), extra named points, the seeds, and the paper's numbers.
//
//   name: thesis_bitwidth
//   description: one line for the report
//   base: ../../configs/quickstart.yaml      # relative to the sweep file
//   sets: ["train.log_interval=10"]          # every point
//   scales:                                  # --scale small|paper adds these
//     small: ["data.dataset=fashion_mnist", "train.epochs=1"]
//     paper: ["data.dataset=cifar10", "train.epochs=50"]
//   axes:                                    # the grid, in this order
//     - {name: bits, key: saved_tensors.default.base_bits, values: [1, 2, 4]}   # one key
//     - name: rounding                       # or labelled values, each a list of --set overrides
//       values:
//         stochastic: ["saved_tensors.default.rounding=stochastic"]
//         nearest: ["saved_tensors.default.rounding=nearest"]
//   points:                                  # run besides the grid (references)
//     - {name: fp32, sets: ["saved_tensors.default=fp32"]}
//   seeds: [0, 1, 2]
//   gradient_fidelity: 16                    # draws per run (0: no fidelity columns)
//   paper:                                   # the paper's figures, beside the measured ones
//     source: "Thesis, Figure 5.1"           # table / figure they come from
//     metric: final_test_acc                 # results.csv column they compare with
//     values: {"bits=2+rounding=stochastic": 0.90}
//   plots:
//     - {x: bits, y: final_test_acc, series: rounding, logx: true, logy: false, title: "..."}
//
// Every key is checked; errors name the file, the key and its line. Two points in one run
// directory, a repeated axis value and a grid over kMaxSweepRuns are refused.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace packrat {

struct SweepAxisValue {
  std::string label;              // "2", "nearest"
  std::vector<std::string> sets;  // the overrides this value applies
};

struct SweepAxis {
  std::string name;
  std::vector<SweepAxisValue> values;
};

struct SweepPoint {
  std::string id;                    // "bits=2+rounding=nearest", or an extra point's name
  std::vector<std::string> labels;   // one per axis ("" for an extra point)
  std::vector<std::string> sets;     // the point's own overrides (axes or extra point)
};

struct SweepPlot {
  std::string x, y, series, title;
  bool logx = false, logy = false;
};

struct PaperFigures {
  std::string source, metric;
  std::map<std::string, double> values;  // point id -> the paper's number
};

struct SweepSpec {
  std::string file;  // the sweep file, for messages
  std::string name, description;
  std::string base;  // resolved path of the base config
  std::vector<std::string> sets;
  std::map<std::string, std::vector<std::string>> scales;
  std::vector<SweepAxis> axes;
  std::vector<SweepPoint> extra_points;
  std::vector<uint64_t> seeds = {0};
  int64_t gradient_fidelity = 0;
  PaperFigures paper;
  std::vector<SweepPlot> plots;

  // The grid's points (cartesian product of the axes, first axis slowest) then the extra points.
  std::vector<SweepPoint> points() const;
  // Every override of one run, in order: sets, the scale's, the point's, then seed and output.dir.
  std::vector<std::string> run_sets(const SweepPoint& p, const std::string& scale, uint64_t seed,
                                    const std::string& run_dir) const;
};

// The most runs (points x seeds) a sweep file may ask for: a bigger grid is refused at parse time.
inline constexpr uint64_t kMaxSweepRuns = 10000;

// The results.csv columns that report.md aggregates, in table order: what a plot's `y` and
// `paper.metric` may name (the gradient fidelity columns when the sweep measures it).
std::vector<std::string> sweep_metric_columns(bool gradient_fidelity);

SweepSpec parse_sweep(const std::string& yaml_text, const std::string& file);
SweepSpec load_sweep(const std::string& path);

// A point id as a directory name: characters outside [A-Za-z0-9._=+-] become '_'.
std::string sweep_dir_name(const std::string& id);

}  // namespace packrat
