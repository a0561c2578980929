#include "experiments/lib/memory_timeline_plot.h"

#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "experiments/lib/gnuplot.h"
#include "experiments/lib/safetensors.h"  // write_file_atomic

namespace packrat {

namespace {

// Stacked areas, one per tag, of bytes held (MiB) against the event index; a line per phase mark.
std::string plot_script(const MemoryTimeline& t, const MemoryReport& report, const std::string& png) {
  const auto events = t.events();
  std::string data;  // event, then MiB per tag, cumulative (for stacked areas)
  for (size_t k = 0; k < events.size(); ++k) {
    data += std::to_string(k);
    double sum = 0;
    for (int64_t b : events[k].current) {
      sum += static_cast<double>(b) / (1 << 20);
      data += fmt::format(" {:.6f}", sum);
    }
    data += "\n";
  }
  std::string gp = fmt::format("set terminal pngcairo size 1200,520 font ',10' noenhanced\nset output {}\n",
                               gnuplot_quote(png));
  gp += "$d << EOD\n" + data + "EOD\n";
  gp += fmt::format("set title {}\n",
                    gnuplot_quote(fmt::format("bytes held on {} over one training step, batch {} (allocator events; "
                                              "peak {:.2f} MiB)",
                                              report.step.device.str(), report.batch_size,
                                              static_cast<double>(t.total_peak()) / (1 << 20))));
  gp += fmt::format("set xlabel 'allocator event'\nset ylabel 'MiB'\nset grid\nset key outside right top\n"
                    "set yrange [0:*]\nset xrange [0:{}]\n", events.empty() ? 1 : events.size() - 1);
  for (const auto& m : t.marks())
    gp += fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead dt 2 lc rgb 'black'\n"
                      "set label {1} at {0},graph 0.97 offset 0.5,0 font ',9'\n",
                      m.event, gnuplot_quote(m.name));
  gp += "plot ";
  for (int i = static_cast<int>(kNumTags) - 1; i >= 0; --i) {  // the highest first, so that lower ones paint over
    const std::string below = i == 0 ? "(0)" : std::to_string(i + 1);  // the tags under it, stacked
    gp += fmt::format("$d using 1:{}:{} with filledcurves title {}{}", below, i + 2,
                      gnuplot_quote(std::string(tag_name(static_cast<MemTag>(i)))), i > 0 ? ", " : "\n");
  }
  return gp;
}

}  // namespace

void write_memory_timeline(const MemoryTimeline& t, const MemoryReport& report, const std::string& dir) {
  namespace fs = std::filesystem;
  write_file_atomic((fs::path(dir) / "memory_timeline.csv").string(), t.csv());
  const std::string png = (fs::path(dir) / "memory_timeline.png").string();
  if (!gnuplot_available()) {
    spdlog::warn("gnuplot not found: no memory_timeline.png (apt-get install gnuplot-nox)");
    return;
  }
  run_gnuplot(plot_script(t, report, png), "memory timeline plot " + png);
}

}  // namespace packrat
