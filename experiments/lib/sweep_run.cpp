#include "experiments/lib/sweep_run.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/csv_table.h"
#include "experiments/lib/dir_lock.h"
#include "experiments/lib/gradient_fidelity.h"
#include "experiments/lib/json.h"
#include "experiments/lib/output_dir.h"
#include "experiments/lib/run.h"
#include "experiments/lib/safetensors.h"  // write_file_atomic
#include "experiments/lib/sweep_report.h"
#include "models/registry.h"
#include "quant/policy/rule_policy.h"

namespace packrat {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDoneMarker = "sweep_done";
constexpr const char* kFailedMarker = "sweep_failed";  // holds the error of a run that failed
const char* const kFidelityColumns[] = {"grad_cosine", "grad_rel_bias", "grad_rel_variance", "grad_bias_z"};

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

std::string sweep_out_dir(const SweepSpec& s, const SweepOptions& o) {
  if (!o.out.empty()) return o.out;
  return (fs::path(s.file).parent_path() / "results" / s.name / o.scale).string();
}

std::vector<SweepRun> plan_sweep(const SweepSpec& s, const SweepOptions& o) {
  PACKRAT_CHECK(o.scale == "small" || o.scale == "paper", "--scale: expected small or paper, got '{}'", o.scale);
  PACKRAT_CHECK(s.scales.empty() || s.scales.count(o.scale), "{}: scales.{} is not given: this sweep has no {} scale",
                s.file, o.scale, o.scale);
  const std::string out = sweep_out_dir(s, o);
  const std::vector<std::string> archs = known_archs();
  std::vector<SweepRun> runs;
  for (const SweepPoint& p : s.points()) {
    for (uint64_t seed : s.seeds) {
      SweepRun r;
      r.point = p;
      r.seed = seed;
      r.dir = (fs::path(out) / "runs" / sweep_dir_name(p.id) / fmt::format("seed{}", seed)).string();
      try {
        r.config = load_config(s.base, s.run_sets(p, o.scale, seed, r.dir));
        PACKRAT_CHECK(std::find(archs.begin(), archs.end(), r.config.model.arch) != archs.end(),
                      "model.arch '{}' is not a known architecture", r.config.model.arch);
        RulePolicy check(r.config.saved_tensors);  // builds every store: bad scheme options throw here
      } catch (const Error& e) {
        fail("{}: point '{}' (scale {}, seed {}): {}", s.file, p.id, o.scale, seed, e.what());
      }
      runs.push_back(std::move(r));
    }
  }
  return runs;
}

std::vector<std::string> results_csv_header(const SweepSpec& s) {
  std::vector<std::string> h = {"point"};
  for (const auto& a : s.axes) h.push_back(a.name);
  for (const char* c : {"seed", "epochs", "steps", "final_test_acc", "best_test_acc", "final_test_loss",
                        "final_train_loss", "final_train_acc", "saved_bytes", "peak_bytes"})
    h.emplace_back(c);
  for (size_t t = 0; t < kNumTags; ++t) h.push_back(fmt::format("peak_{}", tag_name(static_cast<MemTag>(t))));
  h.emplace_back("img_per_s");
  if (s.gradient_fidelity > 0)
    for (const char* c : kFidelityColumns) h.emplace_back(c);
  return h;
}

std::string results_csv_row(const SweepSpec& s, const SweepRun& r) {
  const std::string mpath = (fs::path(r.dir) / "metrics.csv").string();
  const CsvTable m = parse_csv(read_text(mpath), mpath);
  PACKRAT_CHECK(!m.rows.empty(), "{}: no epochs recorded", mpath);
  auto col = [&](const std::string& c) { return m.column(c, mpath); };
  const auto& last = m.rows.back();
  double best = std::nan(""), seconds = 0, images = 0;
  int64_t peak = 0;
  std::array<int64_t, kNumTags> peak_tag{};
  for (const auto& row : m.rows) {
    const double acc = csv_number(row[col("test_acc")]);
    if (std::isfinite(acc) && !(best >= acc)) best = acc;
    const double sec = csv_number(row[col("seconds")]);
    seconds += sec;
    images += sec * csv_number(row[col("img_per_s")]);
    peak = std::max<int64_t>(peak, std::stoll(row[col("peak_bytes")]));
    for (size_t t = 0; t < kNumTags; ++t)
      peak_tag[t] = std::max<int64_t>(peak_tag[t], std::stoll(row[col(fmt::format("peak_{}", tag_name(static_cast<MemTag>(t))))]));
  }
  std::vector<std::string> f = {r.point.id};
  for (const auto& l : r.point.labels) f.push_back(l);
  f.push_back(std::to_string(r.seed));
  f.push_back(last[col("epoch")]);
  f.push_back(last[col("step")]);
  f.push_back(last[col("test_acc")]);
  f.push_back(csv_number_text(best));
  f.push_back(last[col("test_loss")]);
  f.push_back(last[col("train_loss")]);
  f.push_back(last[col("train_acc")]);
  f.push_back(m.rows.front()[col("saved_bytes")]);  // the first step's, as the memory report
  f.push_back(std::to_string(peak));
  for (size_t t = 0; t < kNumTags; ++t) f.push_back(std::to_string(peak_tag[t]));
  f.push_back(csv_number_text(seconds > 0 ? images / seconds : 0.0));
  if (s.gradient_fidelity > 0) {
    const std::string gpath = (fs::path(r.dir) / "gradient_fidelity.json").string();
    const Json g = parse_json(read_text(gpath), gpath).at("total");
    auto val = [](const Json& v) { return v.is_string() ? csv_number(v.get<std::string>()) : v.get<double>(); };
    for (const char* c : {"cosine", "rel_bias", "rel_variance", "bias_z"}) f.push_back(csv_number_text(val(g.at(c))));
  }
  return csv_line(f);
}

namespace {

// Every leaf of a YAML document as "dotted.key" -> its value (a list as one flow-YAML value).
void flatten(const YAML::Node& n, const std::string& path, std::map<std::string, std::string>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) {
      const std::string k = kv.first.as<std::string>();
      flatten(kv.second, path.empty() ? k : path + "." + k, out);
    }
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << n;
  out[path] = e.c_str();
}

// How the config r resolves to now differs from the config.yaml its run directory was made with
// ("train.epochs: 1 -> 2"); "" when they are the same. output.dir is left out: the same
// directory may be spelled otherwise (another --out).
std::string config_change(const SweepRun& r) {
  const fs::path path = fs::path(r.dir) / "config.yaml";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return "its config.yaml is missing, so what it was trained with is unknown";
  std::map<std::string, std::string> was, now;
  try {
    Config c = parse_config(read_text(path), path.string());
    c.output.dir = r.config.output.dir;
    flatten(YAML::Load(config_to_yaml(c)), "", was);  // both sides written by config_to_yaml: same keys, same style
  } catch (const std::exception& e) {
    return fmt::format("its config.yaml cannot be read back ({})", e.what());
  }
  flatten(YAML::Load(config_to_yaml(r.config)), "", now);
  std::vector<std::string> diffs;
  for (const auto& [k, v] : now) {
    const auto it = was.find(k);
    const std::string before = it == was.end() ? "(none)" : it->second;
    if (before != v) diffs.push_back(fmt::format("{}: {} -> {}", k, before, v));
  }
  for (const auto& [k, v] : was)
    if (!now.count(k)) diffs.push_back(fmt::format("{}: {} -> (none)", k, v));
  if (diffs.empty()) return "";
  std::string list;
  for (size_t i = 0; i < diffs.size() && i < 3; ++i) list += (i ? ", " : "") + diffs[i];
  if (diffs.size() > 3) list += fmt::format(" and {} more", diffs.size() - 3);
  return "was made with another config (" + list + ")";
}

// Why the earlier run in r.dir cannot stand for r's point as the sweep file gives it now; "" when
// it can, or when nothing was trained there yet.
std::string earlier_run_problem(const SweepSpec& s, const SweepRun& r) {
  const fs::path dir(r.dir);
  std::error_code ec;
  if (fs::exists(dir / kFailedMarker, ec)) {
    const std::string why = read_text(dir / kFailedMarker);
    return fmt::format("failed in an earlier sweep ({}); its files are kept", why.substr(0, why.find('\n')));
  }
  const bool done = fs::exists(dir / kDoneMarker, ec);
  if (!done && earlier_run_files(r.dir).empty()) return "";
  if (std::string change = config_change(r); !change.empty()) return change;
  if (done && s.gradient_fidelity > 0) {
    const fs::path g = dir / "gradient_fidelity.json";
    int64_t draws = 0;
    try {
      draws = json_integer(parse_json(read_text(g), g.string()).at("draws"));
    } catch (const std::exception&) {
      draws = 0;  // missing or unreadable: measured anew
    }
    if (draws != s.gradient_fidelity)
      return fmt::format("has gradient_fidelity {} where the sweep file now gives {}", draws, s.gradient_fidelity);
  }
  return "";
}

// Which runs' earlier runs must be replaced (earlier_run_problem); without o.rerun, any such run
// refuses the sweep, naming the first and the way out.
std::vector<bool> check_earlier_runs(const SweepSpec& s, const std::vector<SweepRun>& runs, const SweepOptions& o) {
  std::vector<bool> replace(runs.size(), false);
  std::string first;
  size_t count = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string why = earlier_run_problem(s, runs[i]);
    if (why.empty()) continue;
    replace[i] = true;
    if (count++ == 0)
      first = fmt::format("point '{}' seed {} (run directory {}) {}", runs[i].point.id, runs[i].seed, runs[i].dir, why);
  }
  if (count > 0 && !o.rerun)
    fail("{}: {}{}. Rerun the sweep with --rerun to replace {}, or write it to another directory with --out DIR",
         s.file, first, count > 1 ? fmt::format(" (and {} more runs like it)", count - 1) : "",
         count > 1 ? "these runs" : "this run");
  return replace;
}

void write_results(const SweepSpec& s, const std::vector<SweepRun>& runs, const std::string& out) {
  std::string csv = csv_line(results_csv_header(s)) + "\n";
  for (const auto& r : runs)
    if (fs::exists(fs::path(r.dir) / kDoneMarker)) csv += results_csv_row(s, r) + "\n";
  write_file_atomic((fs::path(out) / "results.csv").string(), csv);
}

}  // namespace

SweepOutcome run_sweep(const SweepSpec& s, const SweepOptions& o) {
  const std::vector<SweepRun> runs = plan_sweep(s, o);  // every point checked before any run
  SweepOutcome outcome;
  outcome.out_dir = sweep_out_dir(s, o);
  outcome.runs = static_cast<int64_t>(runs.size());
  const std::string what = o.out.empty() ? "the sweep's output directory" : "--out";
  // Checked before the directory is created or locked, so that a refused sweep writes nothing...
  check_earlier_runs(s, runs, o);
  make_writable_directory(outcome.out_dir, what);
  const DirectoryLock lock(outcome.out_dir, what);  // one sweep at a time in a directory
  // ...and again under the lock: a sweep that held it may have changed the runs meanwhile.
  const std::vector<bool> replace = check_earlier_runs(s, runs, o);
  // --rerun: the replaced runs' markers go first, so that none of them counts as done (in
  // results.csv, or after a stop) before it has run again. Their files stay until it does.
  for (size_t i = 0; i < runs.size(); ++i)
    if (replace[i])
      for (const char* m : {kDoneMarker, kFailedMarker}) fs::remove(fs::path(runs[i].dir) / m);
  for (size_t i = 0; i < runs.size(); ++i) {
    const SweepRun& r = runs[i];
    if (fs::exists(fs::path(r.dir) / kDoneMarker)) {
      ++outcome.done_before;
      continue;
    }
    if (o.stop_after_runs > 0 && outcome.ran >= o.stop_after_runs) break;
    RunOptions ro;
    ro.tty = 0;
    ro.print_report = false;
    if (replace[i]) {
      ro.overwrite = true;
      spdlog::warn("sweep {}: --rerun: replacing the earlier run in {}", s.name, r.dir);
    } else {
      // A run killed mid-way continues from its last checkpoint (bit-identical to running
      // straight through); one killed before its first checkpoint starts again.
      ro.resume = fs::is_directory(r.dir) && latest_checkpoint(r.dir).has_value();
      ro.overwrite = !ro.resume;
    }
    spdlog::info("sweep {}: run {}/{}: {} seed {}{}", s.name, i + 1, runs.size(), r.point.id, r.seed,
                 ro.resume ? " (resumed)" : "");
    const auto level = spdlog::get_level();
    if (o.quiet) spdlog::set_level(spdlog::level::warn);
    try {
      run_training(r.config, ro);
      if (s.gradient_fidelity > 0) gradient_fidelity_mode(r.config, s.gradient_fidelity);
    } catch (const std::exception& e) {
      spdlog::set_level(level);
      // Recorded beside the run's files, which stay: a rerun of the sweep names this run instead of
      // retraining it (and deleting what it left) over and over.
      std::error_code ec;
      if (fs::is_directory(r.dir, ec)) {
        try {
          write_file_atomic((fs::path(r.dir) / kFailedMarker).string(), std::string(e.what()) + "\n");
        } catch (const std::exception&) {
          // a full disk: the error below still names the run
        }
      }
      fail("{}: point '{}' seed {} failed (run directory {}, kept): {}. Fix the cause, then retry it with "
           "--rerun", s.file, r.point.id, r.seed, r.dir, e.what());
    }
    spdlog::set_level(level);
    write_file_atomic((fs::path(r.dir) / kDoneMarker).string(), r.point.id + "\n");
    ++outcome.ran;
    write_results(s, runs, outcome.out_dir);
  }
  write_results(s, runs, outcome.out_dir);
  outcome.complete = std::all_of(runs.begin(), runs.end(), [](const SweepRun& r) {
    return fs::exists(fs::path(r.dir) / kDoneMarker);
  });
  if (outcome.complete) write_sweep_report(s, outcome.out_dir, o.scale);
  return outcome;
}

}  // namespace packrat
