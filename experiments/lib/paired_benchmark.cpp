#include "experiments/lib/paired_benchmark.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/device_runtime.h"
#include "core/error.h"
#include "experiments/lib/session.h"

namespace packrat {

namespace {

// Training step i of a side, under its own device scope and precision; its wall seconds, the
// device idle at both ends.
double timed_step(const Config& c, BenchmarkBed& bed, int64_t i, BenchmarkResult& r) {
  const RunDevice on(c);
  synchronize(on.device());
  const auto start = std::chrono::steady_clock::now();
  r.add_step(bed.step(i));
  synchronize(on.device());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Json PairedBenchmark::json() const {
  Json j = Json::object();
  j["config"] = config.json();
  j["vs"] = vs.json();
  j["config"].erase("peak_bytes");
  j["vs"].erase("peak_bytes");
  j["speed_vs"] = Json(speed_vs);
  j["pair_median"] = Json(pair_median);
  j["pair_min"] = Json(pair_min);
  j["pair_max"] = Json(pair_max);
  return j;
}

PairedBenchmark benchmark_pair(const Config& a, const Config& b, int64_t steps) {
  PACKRAT_CHECK(steps >= 1, "--benchmark: STEPS must be at least 1, got {}", steps);
  PACKRAT_CHECK(a.device == b.device, "--vs: the two configs of a paired benchmark share one process, so one device: "
                "device is {} against {}", a.device, b.device);
  PACKRAT_CHECK(a.threads == b.threads, "--vs: the two configs of a paired benchmark share one process, so its "
                "threads: threads is {} against {}", a.threads, b.threads);
  PACKRAT_CHECK(a.memory.plan != "auto" && b.memory.plan != "auto",
                "--vs: memory.plan: auto chooses its option by benchmarks of its own; give the option it chose "
                "(trainer --memory-report-only prints the plan)");
  apply_process_settings(b);
  apply_process_settings(a);  // a's dropout seed
  auto bed_of = [](const Config& c) {
    const RunDevice on(c);
    BenchmarkBed bed = benchmark_bed(c);
    bed.step(0);  // warm-up
    return bed;
  };
  BenchmarkBed bed_a = bed_of(a), bed_b = bed_of(b);
  PairedBenchmark p{BenchmarkResult::before_steps(a, steps), BenchmarkResult::before_steps(b, steps)};
  std::vector<double> ratios;  // (steps,): b's step time over a's
  for (int64_t i = 1; i <= steps; ++i) {
    double ta = 0, tb = 0;
    if (i % 2 == 1) {  // the side that goes second alternates: each follows the other's step as often
      ta = timed_step(a, bed_a, i, p.config);
      tb = timed_step(b, bed_b, i, p.vs);
    } else {
      tb = timed_step(b, bed_b, i, p.vs);
      ta = timed_step(a, bed_a, i, p.config);
    }
    p.config.seconds += ta;
    p.vs.seconds += tb;
    ratios.push_back(tb / ta);
  }
  for (BenchmarkResult* r : {&p.config, &p.vs})
    r->img_per_s = static_cast<double>(steps * r->batch_size) / r->seconds;
  p.speed_vs = p.vs.seconds / p.config.seconds;
  std::sort(ratios.begin(), ratios.end());
  p.pair_min = ratios.front();
  p.pair_max = ratios.back();
  const size_t n = ratios.size();
  p.pair_median = n % 2 == 1 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
  return p;
}

}  // namespace packrat
