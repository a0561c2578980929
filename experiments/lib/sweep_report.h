#pragma once
// The sweep's report, computed from results.csv alone: report.md (mean ± std over seeds per
// point, beside the paper's figure where the sweep file gives one) and PNG plots (gnuplot): one
// per `plots` entry (mean with a ±std error bar per point, extra points as reference lines, the
// paper's numbers as open markers) and curves.png (train loss by step, first seed of each point).
#include <string>
#include <vector>

#include "experiments/lib/csv_table.h"
#include "experiments/lib/sweep_file.h"

namespace packrat {

struct MetricStats {
  double mean = 0, std = 0;  // std: sample standard deviation (n - 1); 0 for one seed
  int n = 0;                 // seeds with a finite value
};

struct PointSummary {
  std::string id;
  std::vector<std::string> labels;  // per axis; "" for an extra point
  int seeds = 0;
  std::vector<MetricStats> metrics;  // one per report_metrics() entry
};

// The results.csv columns the report aggregates, in table order (fidelity columns when present).
std::vector<std::string> report_metrics(const CsvTable& results);
// Points in the order they first appear in results.csv.
std::vector<PointSummary> summarize_results(const SweepSpec& s, const CsvTable& results);
std::string sweep_report_markdown(const SweepSpec& s, const CsvTable& results, const std::string& scale,
                                  const std::vector<std::string>& images);
// Writes report.md and the PNGs into out_dir from out_dir/results.csv; returns the PNG names.
std::vector<std::string> write_sweep_report(const SweepSpec& s, const std::string& out_dir, const std::string& scale);

}  // namespace packrat
