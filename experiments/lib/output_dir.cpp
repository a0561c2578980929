#include "experiments/lib/output_dir.h"

#include <fcntl.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "experiments/lib/checkpoint.h"

namespace packrat {

namespace fs = std::filesystem;

namespace {

// Every file a training run writes into its directory (besides checkpoints/).
const std::vector<std::string>& run_files() {
  static const std::vector<std::string> files = {
      "metrics.csv",   "metrics.jsonl", "train.log",           "config.yaml",         "memory_report.json",
      "saved_by_scheme.tsv", "gact_bits.csv", "steps.csv", "gradient_fidelity.json", "gradient_fidelity.png",
      "memory_report_ranks.json", "plan.json"};
  return files;
}

// "metrics.csv, train.log, ... and 3 more"
std::string file_list(const std::vector<std::string>& files) {
  std::string list;
  for (size_t i = 0; i < files.size() && i < 4; ++i) list += (i ? ", " : "") + files[i];
  if (files.size() > 4) list += fmt::format(" and {} more", files.size() - 4);
  return list;
}

bool is_checkpoint_name(const std::string& name) { return checkpoint_epoch(name).has_value(); }

// Creates a file in `dir` and removes it: the only test of writability that also holds for root
// on a read-only filesystem.
void check_writable(const fs::path& dir, const std::string& what) {
  const fs::path probe = dir / fmt::format(".packrat_write_test_{}", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("{} {}: cannot write there: {}", what, dir.string(), std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

void make_directory(const fs::path& dir, const std::string& what) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    fail("{} {} is a file, not a directory", what, dir.string());
  fs::create_directories(dir, ec);
  if (ec) fail("{} {}: cannot create the directory: {}", what, dir.string(), ec.message());
}

}  // namespace

void make_writable_directory(const std::string& dir, const std::string& what) {
  make_directory(dir, what);
  check_writable(dir, what);
}

std::vector<std::string> earlier_run_files(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const char* f : {"metrics.csv", "metrics.jsonl", "train.log"}) {
    const fs::path p = fs::path(dir) / f;
    if (fs::exists(p, ec) && !(fs::is_regular_file(p, ec) && fs::file_size(p, ec) == 0)) found.emplace_back(f);
  }
  const fs::path ckpt = fs::path(dir) / "checkpoints";
  if (fs::is_directory(ckpt, ec))
    for (const auto& e : fs::directory_iterator(ckpt, ec))
      if (is_checkpoint_name(e.path().filename().string()))
        found.push_back("checkpoints/" + e.path().filename().string());
  return found;
}

void check_output_dir(const std::string& dir, bool resume, bool overwrite) {
  PACKRAT_CHECK(!(resume && overwrite), "output.dir {}: --resume continues a run, --overwrite replaces it; give one",
                dir);
  const fs::path root(dir), ckpt = root / "checkpoints";
  make_writable_directory(dir, "output.dir");
  std::error_code ec;
  if (fs::exists(ckpt, ec) && !fs::is_directory(ckpt, ec))
    fail("{} is a file, not a directory: the run writes its checkpoints there (move the file away)", ckpt.string());
  if (fs::is_directory(ckpt, ec)) {
    for (const auto& e : fs::directory_iterator(ckpt, ec))
      if (is_checkpoint_name(e.path().filename().string()) && !fs::is_regular_file(e.path(), ec))
        fail("{} is not a regular file: a checkpoint of that name cannot be read or written (move it away)",
             e.path().string());
  }
  if (resume) {
    PACKRAT_CHECK(latest_checkpoint(dir).has_value(), "--resume {}: no checkpoint in {}", dir, ckpt.string());
    return;  // metrics.csv is checked against the checkpoint's epoch (check_metrics_for_resume)
  }
  const std::vector<std::string> earlier = earlier_run_files(dir);
  if (!earlier.empty() && !overwrite)
    fail("output.dir {} holds an earlier run ({}); a fresh run does not overwrite it. Continue it with --resume {}, "
         "choose another directory (--set output.dir=...), or replace it with --overwrite",
         dir, file_list(earlier), dir);
}

std::vector<std::string> check_measurement_dir(const std::string& dir, const std::vector<std::string>& outputs,
                                               bool overwrite, const std::string& flag) {
  std::vector<std::string> earlier = earlier_run_files(dir);
  std::error_code ec;
  for (const auto& f : outputs)
    if (fs::exists(fs::path(dir) / f, ec)) earlier.push_back(f);
  if (!earlier.empty() && !overwrite)
    fail("output.dir {} holds an earlier run ({}); {} does not write into it. Choose another directory (--set "
         "output.dir=...) or replace the earlier run with --overwrite",
         dir, file_list(earlier), flag);
  return earlier;
}

void remove_run_files(const std::string& dir, const std::vector<std::string>& keep) {
  const fs::path root(dir);
  std::error_code ec;
  auto remove = [&](const std::string& name) {
    if (std::find(keep.begin(), keep.end(), name) != keep.end()) return;
    const fs::path p = root / name;
    if (!fs::remove(p, ec) && ec) fail("output.dir {}: --overwrite cannot remove {}: {}", dir, p.string(), ec.message());
  };
  for (const auto& f : run_files()) remove(f);
  for (const auto& f : earlier_run_files(dir))
    if (f.rfind("checkpoints/", 0) == 0) remove(f);
}

void prepare_output_dir(const std::string& dir, bool resume, bool overwrite) {
  check_output_dir(dir, resume, overwrite);
  const std::vector<std::string> earlier = resume ? std::vector<std::string>{} : earlier_run_files(dir);
  if (!earlier.empty()) {  // check_output_dir refused it without --overwrite
    remove_run_files(dir);
    spdlog::warn("output.dir {}: --overwrite: removed the earlier run ({} files)", dir, earlier.size());
  }
  make_writable_directory((fs::path(dir) / "checkpoints").string(), "the checkpoint directory");
}

DirectoryLock lock_output_dir(const std::string& dir) {
  make_writable_directory(dir, "output.dir");
  return DirectoryLock(dir, "output.dir");
}

void check_not_a_run_file(const std::string& dir, const std::string& file) {
  std::error_code ec;
  for (const auto& f : run_files())
    if (fs::equivalent(file, fs::path(dir) / f, ec))
      fail("{} is your config, and output.dir {} is where the run writes its {}: the run would overwrite your file; "
           "choose another output.dir (--set output.dir=...) or move the config out of it",
           file, dir, f);
}

std::string expand_home(const std::string& path, const std::string& what) {
  if (path.empty() || path[0] != '~') return path;
  const size_t slash = path.find('/');
  const std::string user = path.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
  const std::string rest = slash == std::string::npos ? "" : path.substr(slash);
  if (user.empty()) {
    const char* home = std::getenv("HOME");
    PACKRAT_CHECK(home && *home, "{} '{}': HOME is not set, so ~ cannot be expanded; give the full path", what, path);
    return home + rest;
  }
  const passwd* pw = ::getpwnam(user.c_str());
  PACKRAT_CHECK(pw && pw->pw_dir, "{} '{}': there is no user '{}' to expand ~{} for; give the full path", what, path,
                user, user);
  return pw->pw_dir + rest;
}

}  // namespace packrat
