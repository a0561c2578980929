#include "experiments/lib/sweep_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "experiments/lib/gradient_fidelity.h"

namespace packrat {

namespace {

std::string at(const std::string& file, const std::string& key, const YAML::Node& n) {
  return n.Mark().is_null() ? fmt::format("{}: {}", file, key) : fmt::format("{}: {} (line {})", file, key, n.Mark().line + 1);
}

// A mapping key as text: a list or a map used as a key (`[a, b]: 1`) is refused with its line.
std::string key_text(const YAML::Node& key, const std::string& file, const std::string& path) {
  PACKRAT_CHECK(key.IsScalar(), "{}: a key must be a single value, not a list or a mapping",
                at(file, path.empty() ? "the sweep file" : path, key));
  return key.as<std::string>();
}

void check_keys(const YAML::Node& map, const std::string& file, const std::string& path,
                const std::set<std::string>& known) {
  PACKRAT_CHECK(map.IsMap(), "{}: must be a mapping", at(file, path.empty() ? "the sweep file" : path, map));
  for (const auto& kv : map) {
    const std::string k = key_text(kv.first, file, path);
    if (known.count(k)) continue;
    std::string names;
    for (const auto& n : known) names += (names.empty() ? "" : ", ") + n;
    fail("{}: unknown key '{}' (known: {})", at(file, path.empty() ? k : path + "." + k, kv.first), k, names);
  }
}

std::string scalar(const YAML::Node& n, const std::string& file, const std::string& key) {
  PACKRAT_CHECK(n.IsScalar(), "{}: must be a single value", at(file, key, n));
  return n.as<std::string>();
}

std::vector<std::string> string_list(const YAML::Node& n, const std::string& file, const std::string& key) {
  std::vector<std::string> out;
  if (!n.IsDefined() || n.IsNull()) return out;
  PACKRAT_CHECK(n.IsSequence(), "{}: must be a list of key=value overrides", at(file, key, n));
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string s = scalar(n[i], file, fmt::format("{}[{}]", key, i));
    PACKRAT_CHECK(s.find('=') != std::string::npos, "{}: '{}' is not a key=value override",
                  at(file, fmt::format("{}[{}]", key, i), n[i]), s);
    out.push_back(s);
  }
  return out;
}

// A YAML value written back as the text --set reads ("2", "[a, b]", "{scheme: fp32}").
std::string yaml_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.as<std::string>();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

// `metric` must be a column that report.md aggregates (sweep_metric_columns).
void check_metric(const SweepSpec& s, const YAML::Node& n, const std::string& key, const std::string& metric) {
  const std::vector<std::string> known = sweep_metric_columns(s.gradient_fidelity > 0);
  if (std::find(known.begin(), known.end(), metric) != known.end()) return;
  std::string names;
  for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
  fail("{}: '{}' is not a results.csv column of the report (known: {})", at(s.file, key, n), metric, names);
}

}  // namespace

std::vector<std::string> sweep_metric_columns(bool gradient_fidelity) {
  std::vector<std::string> m = {"final_test_acc", "best_test_acc", "final_test_loss", "saved_bytes", "peak_bytes",
                                "img_per_s"};
  if (gradient_fidelity) m.insert(m.end(), {"grad_cosine", "grad_rel_bias", "grad_rel_variance"});
  return m;
}

std::string sweep_dir_name(const std::string& id) {
  std::string s;
  for (char ch : id) s += std::isalnum(static_cast<unsigned char>(ch)) || std::string("._=+-").find(ch) != std::string::npos ? ch : '_';
  return s;
}

namespace {

SweepSpec parse_sweep_yaml(const std::string& yaml_text_in, const std::string& file) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text_in);
  } catch (const YAML::Exception& e) {
    fail("{}: YAML syntax error at line {}, column {}: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  check_keys(root, file, "", {"name", "description", "base", "sets", "scales", "axes", "points", "seeds",
                              "gradient_fidelity", "paper", "plots"});
  SweepSpec s;
  s.file = file;
  PACKRAT_CHECK(root["name"].IsDefined(), "{}: 'name' is missing", file);
  s.name = scalar(root["name"], file, "name");
  if (root["description"]) s.description = scalar(root["description"], file, "description");
  PACKRAT_CHECK(root["base"].IsDefined(), "{}: 'base' (the trainer config every point starts from) is missing", file);
  const std::string base = scalar(root["base"], file, "base");
  s.base = (std::filesystem::path(file).parent_path() / base).lexically_normal().string();
  PACKRAT_CHECK(std::filesystem::is_regular_file(s.base), "{}: base config {} not found (resolved to {}; 'base' is "
                "relative to the sweep file)", at(file, "base", root["base"]), base, s.base);
  s.sets = string_list(root["sets"], file, "sets");
  if (const YAML::Node sc = root["scales"]) {
    check_keys(sc, file, "scales", {"small", "paper"});
    for (const auto& kv : sc) {
      const std::string k = key_text(kv.first, file, "scales");
      s.scales[k] = string_list(kv.second, file, "scales." + k);
    }
  }
  std::set<std::string> axis_names;
  if (const YAML::Node ax = root["axes"]) {
    PACKRAT_CHECK(ax.IsSequence(), "{}: must be a list of axes", at(file, "axes", ax));
    for (size_t i = 0; i < ax.size(); ++i) {
      const std::string where = fmt::format("axes[{}]", i);
      check_keys(ax[i], file, where, {"name", "key", "values"});
      SweepAxis a;
      PACKRAT_CHECK(ax[i]["name"].IsDefined(), "{}: 'name' is missing", at(file, where, ax[i]));
      a.name = scalar(ax[i]["name"], file, where + ".name");
      PACKRAT_CHECK(axis_names.insert(a.name).second, "{}: axis '{}' is named twice", at(file, where, ax[i]), a.name);
      const YAML::Node v = ax[i]["values"];
      PACKRAT_CHECK(v.IsDefined() && v.size() > 0, "{}: 'values' is missing or empty", at(file, where, ax[i]));
      if (ax[i]["key"]) {
        const std::string key = scalar(ax[i]["key"], file, where + ".key");
        PACKRAT_CHECK(v.IsSequence(), "{}: with 'key', 'values' is a list of values", at(file, where + ".values", v));
        for (size_t j = 0; j < v.size(); ++j) {
          const std::string val = yaml_text(v[j]);
          a.values.push_back({val, {key + "=" + val}});
        }
      } else {
        PACKRAT_CHECK(v.IsMap(), "{}: without 'key', 'values' maps each label to its list of overrides",
                      at(file, where + ".values", v));
        for (const auto& kv : v) {
          const std::string label = key_text(kv.first, file, where + ".values");
          a.values.push_back({label, string_list(kv.second, file, where + ".values." + label)});
        }
      }
      // Two values with one directory name would share a run directory: the second would be taken
      // as done by the first ([0.1, 0.1], or labels "a b" and "a_b").
      std::map<std::string, std::string> dirs;  // directory name -> label
      for (size_t j = 0; j < a.values.size(); ++j) {
        const std::string& label = a.values[j].label;
        const auto [it, fresh] = dirs.emplace(sweep_dir_name(label), label);
        PACKRAT_CHECK(fresh || it->second != label, "{}: value '{}' is listed twice", at(file, where + ".values", v),
                      label);
        PACKRAT_CHECK(fresh, "{}: values '{}' and '{}' would share the run directory name '{}' (characters outside "
                      "[A-Za-z0-9._=+-] become '_'); rename one", at(file, where + ".values", v), it->second, label,
                      it->first);
      }
      s.axes.push_back(std::move(a));
    }
    // The grid is the product of the axes: refuse it before points() would allocate it.
    uint64_t n = 1;
    bool overflow = false;
    std::string sizes;
    for (const auto& a : s.axes) {
      overflow = overflow || __builtin_mul_overflow(n, uint64_t{a.values.size()}, &n);
      sizes += (sizes.empty() ? "" : " x ") + std::to_string(a.values.size());
    }
    PACKRAT_CHECK(!overflow && n <= kMaxSweepRuns, "{}: the grid has {} points ({} values); a sweep has at most {} "
                  "runs: split it or drop values", at(file, "axes", ax), overflow ? "over 2^64" : std::to_string(n),
                  sizes, kMaxSweepRuns);
  }
  std::set<std::string> ids;
  for (const auto& p : s.points()) ids.insert(p.id);
  if (const YAML::Node pts = root["points"]) {
    PACKRAT_CHECK(pts.IsSequence(), "{}: must be a list of {{name, sets}}", at(file, "points", pts));
    for (size_t i = 0; i < pts.size(); ++i) {
      const std::string where = fmt::format("points[{}]", i);
      check_keys(pts[i], file, where, {"name", "sets"});
      SweepPoint p;
      PACKRAT_CHECK(pts[i]["name"].IsDefined(), "{}: 'name' is missing", at(file, where, pts[i]));
      p.id = scalar(pts[i]["name"], file, where + ".name");
      PACKRAT_CHECK(ids.insert(p.id).second, "{}: point '{}' is named twice", at(file, where, pts[i]), p.id);
      p.labels.assign(s.axes.size(), "");
      p.sets = string_list(pts[i]["sets"], file, where + ".sets");
      s.extra_points.push_back(std::move(p));
    }
  }
  PACKRAT_CHECK(!s.axes.empty() || !s.extra_points.empty(), "{}: no points: give 'axes' or 'points'", file);
  {
    // Every point needs a run directory of its own: a second point in the first's directory would
    // be taken as done and reported with the first one's results.
    std::map<std::string, std::string> dirs;  // directory name -> point id
    const YAML::Node where = root["points"] ? root["points"] : root["axes"];
    for (const SweepPoint& p : s.points()) {
      const std::string d = sweep_dir_name(p.id);
      PACKRAT_CHECK(d != "." && d != "..", "{}: point '{}' cannot be a directory name", at(file, "points", where), p.id);
      const auto [it, fresh] = dirs.emplace(d, p.id);
      PACKRAT_CHECK(fresh, "{}: points '{}' and '{}' would share the run directory runs/{} (characters outside "
                    "[A-Za-z0-9._=+-] become '_'); rename one", at(file, "points", where), it->second, p.id, d);
    }
  }
  if (const YAML::Node sd = root["seeds"]) {
    PACKRAT_CHECK(sd.IsSequence() && sd.size() > 0, "{}: must be a non-empty list of seeds", at(file, "seeds", sd));
    s.seeds.clear();
    std::set<uint64_t> seen;
    for (size_t i = 0; i < sd.size(); ++i) {
      uint64_t v = 0;
      try {
        v = sd[i].as<uint64_t>();
      } catch (const YAML::Exception&) {
        fail("{}: must be a non-negative integer", at(file, fmt::format("seeds[{}]", i), sd[i]));
      }
      PACKRAT_CHECK(seen.insert(v).second, "{}: seed {} is listed twice", at(file, "seeds", sd), v);
      s.seeds.push_back(v);
    }
  }
  const size_t runs = s.points().size() * s.seeds.size();
  PACKRAT_CHECK(runs <= kMaxSweepRuns, "{}: {} points x {} seeds = {} runs; a sweep has at most {} runs: split it",
                file, s.points().size(), s.seeds.size(), runs, kMaxSweepRuns);
  if (const YAML::Node g = root["gradient_fidelity"]) {
    try {
      s.gradient_fidelity = g.as<int64_t>();
    } catch (const YAML::Exception&) {
      fail("{}: must be an integer", at(file, "gradient_fidelity", g));
    }
    PACKRAT_CHECK(s.gradient_fidelity == 0 || (s.gradient_fidelity >= 2 && s.gradient_fidelity <= kMaxFidelityDraws),
                  "{}: draws must be 0 (off) or in [2, {}], got {}", at(file, "gradient_fidelity", g), kMaxFidelityDraws,
                  s.gradient_fidelity);
  }
  if (const YAML::Node pp = root["paper"]) {
    check_keys(pp, file, "paper", {"source", "metric", "values"});
    PACKRAT_CHECK(pp["source"] && pp["metric"], "{}: needs 'source' (table / figure) and 'metric'", at(file, "paper", pp));
    s.paper.source = scalar(pp["source"], file, "paper.source");
    s.paper.metric = scalar(pp["metric"], file, "paper.metric");
    check_metric(s, pp["metric"], "paper.metric", s.paper.metric);
    if (const YAML::Node v = pp["values"]) {
      PACKRAT_CHECK(v.IsMap(), "{}: must map point ids to numbers", at(file, "paper.values", v));
      for (const auto& kv : v) {
        const std::string id = key_text(kv.first, file, "paper.values");
        PACKRAT_CHECK(ids.count(id), "{}: '{}' is not a point of this sweep", at(file, "paper.values." + id, kv.first), id);
        try {
          s.paper.values[id] = kv.second.as<double>();
        } catch (const YAML::Exception&) {
          fail("{}: must be a number", at(file, "paper.values." + id, kv.second));
        }
      }
    }
  }
  if (const YAML::Node pl = root["plots"]) {
    PACKRAT_CHECK(pl.IsSequence(), "{}: must be a list of plots", at(file, "plots", pl));
    for (size_t i = 0; i < pl.size(); ++i) {
      const std::string where = fmt::format("plots[{}]", i);
      check_keys(pl[i], file, where, {"x", "y", "series", "title", "logx", "logy"});
      SweepPlot p;
      PACKRAT_CHECK(pl[i]["x"] && pl[i]["y"], "{}: needs 'x' (an axis) and 'y' (a results.csv column)",
                    at(file, where, pl[i]));
      p.x = scalar(pl[i]["x"], file, where + ".x");
      p.y = scalar(pl[i]["y"], file, where + ".y");
      check_metric(s, pl[i]["y"], where + ".y", p.y);  // now, not after every run has trained
      PACKRAT_CHECK(axis_names.count(p.x), "{}: '{}' is not an axis", at(file, where + ".x", pl[i]["x"]), p.x);
      if (pl[i]["series"]) {
        p.series = scalar(pl[i]["series"], file, where + ".series");
        PACKRAT_CHECK(axis_names.count(p.series) && p.series != p.x, "{}: '{}' is not another axis",
                      at(file, where + ".series", pl[i]["series"]), p.series);
      }
      // The other axes' points would fall on the same x in one series.
      PACKRAT_CHECK(s.axes.size() <= (p.series.empty() ? 1u : 2u),
                    "{}: the sweep has {} axes; a plot draws its x axis and one series axis, so the others would "
                    "mix in one line (leave the plot out; report.md's table has every point)",
                    at(file, where, pl[i]), s.axes.size());
      if (pl[i]["title"]) p.title = scalar(pl[i]["title"], file, where + ".title");
      for (const char* k : {"logx", "logy"}) {
        if (!pl[i][k]) continue;
        bool v = false;
        try {
          v = pl[i][k].as<bool>();
        } catch (const YAML::Exception&) {
          fail("{}: must be true or false", at(file, where + "." + k, pl[i][k]));
        }
        (std::string(k) == "logx" ? p.logx : p.logy) = v;
      }
      s.plots.push_back(p);
    }
  }
  return s;
}

}  // namespace

SweepSpec parse_sweep(const std::string& yaml_text, const std::string& file) {
  try {
    return parse_sweep_yaml(yaml_text, file);
  } catch (const YAML::Exception& e) {
    // A node of an unexpected kind that no check above names: still an error naming the file and line.
    if (e.mark.is_null()) fail("{}: {}", file, e.msg);
    fail("{}: line {}: {}", file, e.mark.line + 1, e.msg);
  }
}

SweepSpec load_sweep(const std::string& path) {
  std::ifstream in(path);
  PACKRAT_CHECK(in.good() && !std::filesystem::is_directory(path), "{}: cannot read the sweep file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_sweep(ss.str(), path);
}

std::vector<SweepPoint> SweepSpec::points() const {
  std::vector<SweepPoint> out;
  if (!axes.empty()) {
    std::vector<size_t> idx(axes.size(), 0);
    while (true) {
      SweepPoint p;
      for (size_t a = 0; a < axes.size(); ++a) {
        const SweepAxisValue& v = axes[a].values[idx[a]];
        p.id += (a ? "+" : "") + axes[a].name + "=" + v.label;
        p.labels.push_back(v.label);
        p.sets.insert(p.sets.end(), v.sets.begin(), v.sets.end());
      }
      out.push_back(std::move(p));
      size_t a = axes.size();
      while (a > 0 && ++idx[a - 1] == axes[a - 1].values.size()) idx[--a] = 0;
      if (a == 0) break;
    }
  }
  out.insert(out.end(), extra_points.begin(), extra_points.end());
  return out;
}

std::vector<std::string> SweepSpec::run_sets(const SweepPoint& p, const std::string& scale, uint64_t seed,
                                             const std::string& run_dir) const {
  std::vector<std::string> all = sets;
  if (auto it = scales.find(scale); it != scales.end()) all.insert(all.end(), it->second.begin(), it->second.end());
  all.insert(all.end(), p.sets.begin(), p.sets.end());
  all.push_back(fmt::format("seed={}", seed));
  all.push_back("output.dir=" + run_dir);
  return all;
}

}  // namespace packrat
