#include "experiments/lib/sweep_report.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "core/error.h"
#include "experiments/lib/gnuplot.h"
#include "experiments/lib/safetensors.h"  // write_file_atomic

namespace packrat {

namespace fs = std::filesystem;

namespace {

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// How a column is shown: accuracies in %, bytes in MiB.
double display(const std::string& metric, double v) {
  if (metric.find("acc") != std::string::npos) return 100 * v;
  if (metric.find("bytes") != std::string::npos) return v / (1024.0 * 1024.0);
  return v;
}

std::string title_of(const std::string& metric) {
  static const std::map<std::string, std::string> t = {
      {"final_test_acc", "final test acc (%)"}, {"best_test_acc", "best test acc (%)"},
      {"final_test_loss", "final test loss"},   {"final_train_loss", "final train loss"},
      {"saved_bytes", "saved for backward (MiB)"}, {"peak_bytes", "peak (MiB)"},
      {"img_per_s", "img/s"},                   {"grad_cosine", "grad cosine"},
      {"grad_rel_bias", "grad rel. bias"},      {"grad_rel_variance", "grad rel. variance"}};
  auto it = t.find(metric);
  return it == t.end() ? metric : it->second;
}

std::string fmt_value(const std::string& metric, double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "n/a" : (v > 0 ? "inf" : "-inf");
  const double d = display(metric, v);
  if (metric == "grad_cosine") return fmt::format("{:.5f}", d);
  if (metric.rfind("grad_", 0) == 0) return fmt::format("{:.3g}", d);
  if (metric == "img_per_s") return fmt::format("{:.0f}", d);
  return fmt::format("{:.2f}", d);
}

std::string fmt_stats(const std::string& metric, const MetricStats& m) {
  if (m.n == 0) return "n/a";
  if (m.n == 1) return fmt_value(metric, m.mean);
  return fmt_value(metric, m.mean) + " ± " + fmt_value(metric, m.std);
}

std::string machine() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  return fmt::format("{}, {} hardware threads", model, std::thread::hardware_concurrency());
}

}  // namespace

std::vector<std::string> report_metrics(const CsvTable& results) {
  std::vector<std::string> m = {"final_test_acc", "best_test_acc", "final_test_loss", "saved_bytes", "peak_bytes",
                                "img_per_s"};
  for (const char* c : {"grad_cosine", "grad_rel_bias", "grad_rel_variance"})
    if (results.has(c)) m.emplace_back(c);
  return m;
}

std::vector<PointSummary> summarize_results(const SweepSpec& s, const CsvTable& results) {
  const std::string what = "results.csv";
  const std::vector<std::string> metrics = report_metrics(results);
  const size_t point_col = results.column("point", what);
  std::vector<size_t> axis_cols, metric_cols;
  for (const auto& a : s.axes) axis_cols.push_back(results.column(a.name, what));
  for (const auto& m : metrics) metric_cols.push_back(results.column(m, what));
  std::vector<PointSummary> pts;
  std::map<std::string, std::vector<std::vector<double>>> values;  // id -> metric -> per seed
  for (const auto& row : results.rows) {
    const std::string& id = row[point_col];
    if (!values.count(id)) {
      PointSummary p;
      p.id = id;
      for (size_t c : axis_cols) p.labels.push_back(row[c]);
      pts.push_back(p);
      values[id].resize(metrics.size());
    }
    for (size_t k = 0; k < metrics.size(); ++k) values[id][k].push_back(csv_number(row[metric_cols[k]]));
  }
  for (auto& p : pts) {
    const auto& v = values[p.id];
    p.seeds = static_cast<int>(v.empty() ? 0 : v[0].size());
    for (const auto& seeds : v) {
      MetricStats st;
      double sum = 0;
      for (double x : seeds)
        if (std::isfinite(x)) sum += x, ++st.n;
      if (st.n > 0) st.mean = sum / st.n;
      if (st.n > 1) {
        double ss = 0;
        for (double x : seeds)
          if (std::isfinite(x)) ss += (x - st.mean) * (x - st.mean);
        st.std = std::sqrt(ss / (st.n - 1));
      }
      // A column that is infinite in every seed (a deterministic scheme's bias z) stays so.
      if (st.n == 0 && !seeds.empty() && std::isinf(seeds[0])) st.mean = seeds[0], st.n = 1;
      p.metrics.push_back(st);
    }
  }
  return pts;
}

std::string sweep_report_markdown(const SweepSpec& s, const CsvTable& results, const std::string& scale,
                                  const std::vector<std::string>& images) {
  const std::vector<std::string> metrics = report_metrics(results);
  const std::vector<PointSummary> pts = summarize_results(s, results);
  std::string md = fmt::format("# Sweep `{}` ({} scale)\n\n", s.name, scale);
  if (!s.description.empty()) md += s.description + "\n\n";
  md += fmt::format("Generated by `build/bin/sweep {} --scale {}` from `results.csv` ({} runs: {} points x seeds {}). "
                    "Base config `{}`. Mean ± sample standard deviation over seeds. Measured on {} (shared with other "
                    "jobs: img/s are indicative only).\n\n",
                    s.file, scale, results.rows.size(), pts.size(),
                    [&] {
                      std::string x;
                      for (auto v : s.seeds) x += (x.empty() ? "" : ", ") + std::to_string(v);
                      return x;
                    }(),
                    s.base, machine());
  const bool paper = !s.paper.values.empty();
  md += "| point | seeds |";
  for (const auto& m : metrics) md += " " + title_of(m) + " |";
  if (paper) md += fmt::format(" paper: {} |", title_of(s.paper.metric));
  md += "\n|---|---|";
  for (size_t i = 0; i < metrics.size(); ++i) md += "---|";
  if (paper) md += "---|";
  md += "\n";
  for (const auto& p : pts) {
    md += fmt::format("| {} | {} |", p.id, p.seeds);
    for (size_t k = 0; k < metrics.size(); ++k) md += " " + fmt_stats(metrics[k], p.metrics[k]) + " |";
    if (paper) {
      auto it = s.paper.values.find(p.id);
      md += it == s.paper.values.end() ? " |" : fmt::format(" {:.2f} |", it->second);
    }
    md += "\n";
  }
  if (paper)
    md += fmt::format("\nPaper column: {} (in the units of the table: accuracy in %). The paper's setting differs from "
                      "this scale; see the README beside the sweep file.\n",
                      s.paper.source);
  for (const auto& img : images) md += fmt::format("\n![{}]({})\n", img, img);
  return md;
}

namespace {

std::string plot_script(const SweepSpec& s, const SweepPlot& pl, const std::vector<PointSummary>& pts,
                        const CsvTable& results, const std::string& png) {
  const std::vector<std::string> metrics = report_metrics(results);
  size_t k = 0;
  while (k < metrics.size() && metrics[k] != pl.y) ++k;
  PACKRAT_CHECK(k < metrics.size(), "{}: plot y '{}' is not a report column of results.csv", s.file, pl.y);
  size_t xi = 0, si = SIZE_MAX;
  for (size_t a = 0; a < s.axes.size(); ++a) {
    if (s.axes[a].name == pl.x) xi = a;
    if (s.axes[a].name == pl.series) si = a;
  }
  const SweepAxis& xa = s.axes[xi];
  bool numeric = true;
  for (const auto& v : xa.values) numeric = numeric && is_number(v.label);
  auto xpos = [&](const std::string& label) {
    if (numeric) return csv_number(label);
    for (size_t i = 0; i < xa.values.size(); ++i)
      if (xa.values[i].label == label) return static_cast<double>(i);
    return 0.0;
  };
  std::vector<std::string> series = {""};
  if (si != SIZE_MAX) {
    series.clear();
    for (const auto& v : s.axes[si].values) series.push_back(v.label);
  }
  std::string gp = fmt::format("set terminal pngcairo size 900,560 font ',10' noenhanced\nset output {}\n", gnuplot_quote(png));
  gp += fmt::format("set title {}\nset xlabel {}\nset ylabel {}\nset grid\nset key outside right\n",
                    gnuplot_quote(pl.title.empty() ? fmt::format("{}: {} by {}", s.name, title_of(pl.y), pl.x) : pl.title),
                    gnuplot_quote(pl.x), gnuplot_quote(title_of(pl.y)));
  if (pl.logx && numeric) gp += "set logscale x 2\n";
  if (pl.logy) gp += "set logscale y\nset format y '%g'\n";
  gp += "set offsets graph 0.04, graph 0.04, graph 0.05, graph 0.05\n";  // no point on the frame
  if (!numeric) {
    gp += "set xtics (";
    for (size_t i = 0; i < xa.values.size(); ++i) gp += fmt::format("{}{} {}", i ? ", " : "", gnuplot_quote(xa.values[i].label), i);
    gp += ")\nset xrange [-0.5:" + std::to_string(xa.values.size() - 0.5) + "]\n";
  }
  std::vector<std::string> plots;
  for (size_t j = 0; j < series.size(); ++j) {
    std::string block = fmt::format("$s{} << EOD\n", j), paper_block = fmt::format("$p{} << EOD\n", j);
    bool any_paper = false;
    for (const auto& p : pts) {
      if (p.labels.empty() || p.labels[xi].empty()) continue;  // extra points
      if (si != SIZE_MAX && p.labels[si] != series[j]) continue;
      const MetricStats& st = p.metrics[k];
      if (st.n == 0) continue;
      block += fmt::format("{:.9g} {:.9g} {:.9g}\n", xpos(p.labels[xi]), display(pl.y, st.mean), display(pl.y, st.std));
      if (auto it = s.paper.values.find(p.id); it != s.paper.values.end() && s.paper.metric == pl.y) {
        paper_block += fmt::format("{:.9g} {:.9g}\n", xpos(p.labels[xi]), it->second);
        any_paper = true;
      }
    }
    gp += block + "EOD\n" + paper_block + "EOD\n";
    const std::string name = series[j].empty() ? pl.y : pl.series + "=" + series[j];
    plots.push_back(fmt::format("$s{} using 1:2:3 with yerrorlines lw 2 lc {} pt 7 title {}", j, j + 1, gnuplot_quote(name)));
    if (any_paper)
      plots.push_back(fmt::format("$p{} using 1:2 with points lc {} pt 6 ps 2 title {}", j, j + 1,
                                  gnuplot_quote("paper " + name)));
  }
  int ref = 0;
  for (const auto& p : pts) {
    if (!(p.labels.empty() || p.labels[xi].empty()) || p.metrics[k].n == 0) continue;
    if (pl.logy && !(p.metrics[k].mean > 0)) continue;  // no place on a log axis
    plots.push_back(fmt::format("{:.9g} with lines dt 2 lw 2 lc {} title {}", display(pl.y, p.metrics[k].mean),
                                series.size() + 1 + ref++, gnuplot_quote(p.id + " (mean)")));
  }
  gp += "plot ";
  for (size_t i = 0; i < plots.size(); ++i) gp += (i ? ", " : "") + plots[i];
  return gp + "\n";
}

// Train loss by step (steps.csv) of each point's first seed.
std::string curves_script(const SweepSpec& s, const std::string& out_dir, const std::vector<PointSummary>& pts,
                          const std::string& png) {
  std::string gp = fmt::format("set terminal pngcairo size 1000,600 font ',10' noenhanced\nset output {}\n", gnuplot_quote(png));
  gp += fmt::format("set title {}\nset xlabel 'step'\nset ylabel 'train loss'\nset grid\nset key outside right\n"
                    "set datafile separator ','\n",
                    gnuplot_quote(s.name + ": train loss by step (seed " + std::to_string(s.seeds.front()) + ")"));
  std::vector<std::string> plots;
  for (const auto& p : pts) {
    const fs::path f = fs::path(out_dir) / "runs" / sweep_dir_name(p.id) / fmt::format("seed{}", s.seeds.front()) / "steps.csv";
    if (!fs::exists(f)) continue;
    plots.push_back(fmt::format("{} using (column('step')):(column('train_loss')) with lines lw 1.5 title {}",
                                gnuplot_quote(f.string()), gnuplot_quote(p.id)));
  }
  if (plots.empty()) return "";
  gp += "plot ";
  for (size_t i = 0; i < plots.size(); ++i) gp += (i ? ", " : "") + plots[i];
  return gp + "\n";
}

}  // namespace

std::vector<std::string> write_sweep_report(const SweepSpec& s, const std::string& out_dir, const std::string& scale) {
  const CsvTable results = read_csv((fs::path(out_dir) / "results.csv").string());
  const std::vector<PointSummary> pts = summarize_results(s, results);
  std::vector<std::string> images;
  if (gnuplot_available()) {
    for (size_t i = 0; i < s.plots.size(); ++i) {
      const std::string name = fmt::format("{}_{}.png", s.plots[i].y, s.plots[i].x);
      run_gnuplot(plot_script(s, s.plots[i], pts, results, (fs::path(out_dir) / name).string()), "sweep plot " + name);
      images.push_back(name);
    }
    if (const std::string gp = curves_script(s, out_dir, pts, (fs::path(out_dir) / "curves.png").string()); !gp.empty()) {
      run_gnuplot(gp, "sweep curves.png");
      images.emplace_back("curves.png");
    }
  } else {
    spdlog::warn("gnuplot not found: report.md without plots (apt-get install gnuplot-nox)");
  }
  write_file_atomic((fs::path(out_dir) / "report.md").string(), sweep_report_markdown(s, results, scale, images));
  return images;
}

}  // namespace packrat
