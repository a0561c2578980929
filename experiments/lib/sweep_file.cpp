#include "experiments/lib/sweep_file.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "experiments/lib/gradient_fidelity.h"

namespace packrat {

namespace {

std::string at(const std::string& file, const std::string& key, const YAML::Node& n) {
  return n.Mark().is_null() ? fmt::format("{}: {}", file, key) : fmt::format("{}: {} (line {})", file, key, n.Mark().line + 1);
}

void check_keys(const YAML::Node& map, const std::string& file, const std::string& path,
                const std::set<std::string>& known) {
  PACKRAT_CHECK(map.IsMap(), "{}: must be a mapping", at(file, path.empty() ? "the sweep file" : path, map));
  for (const auto& kv : map) {
    const std::string k = kv.first.as<std::string>();
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

}  // namespace

std::string sweep_dir_name(const std::string& id) {
  std::string s;
  for (char ch : id) s += std::isalnum(static_cast<unsigned char>(ch)) || std::string("._=+-").find(ch) != std::string::npos ? ch : '_';
  return s;
}

SweepSpec parse_sweep(const std::string& yaml_text_in, const std::string& file) {
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
      const std::string k = kv.first.as<std::string>();
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
          const std::string label = kv.first.as<std::string>();
          a.values.push_back({label, string_list(kv.second, file, where + ".values." + label)});
        }
      }
      s.axes.push_back(std::move(a));
    }
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
    if (const YAML::Node v = pp["values"]) {
      PACKRAT_CHECK(v.IsMap(), "{}: must map point ids to numbers", at(file, "paper.values", v));
      for (const auto& kv : v) {
        const std::string id = kv.first.as<std::string>();
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
