#include "experiments/lib/output_dir.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "experiments/lib/checkpoint.h"

namespace packrat {

namespace fs = std::filesystem;

namespace {

// Every file a training run writes into its directory (besides checkpoints/).
const std::vector<std::string>& run_files() {
  static const std::vector<std::string> files = {"metrics.csv",        "metrics.jsonl",       "train.log",
                                                 "config.yaml",        "memory_report.json", "saved_by_scheme.tsv",
                                                 "gact_bits.csv",      "steps.csv",          "gradient_fidelity.json"};
  return files;
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

void prepare_output_dir(const std::string& dir, bool resume, bool overwrite) {
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
  } else {
    const std::vector<std::string> earlier = earlier_run_files(dir);
    if (!earlier.empty() && !overwrite) {
      std::string list;
      for (size_t i = 0; i < earlier.size() && i < 4; ++i) list += (i ? ", " : "") + earlier[i];
      if (earlier.size() > 4) list += fmt::format(" and {} more", earlier.size() - 4);
      fail("output.dir {} holds an earlier run ({}); a fresh run does not overwrite it. Continue it with --resume {}, "
           "choose another directory (--set output.dir=...), or replace it with --overwrite",
           dir, list, dir);
    }
    if (!earlier.empty()) {
      auto remove = [&](const fs::path& p) {
        if (!fs::remove(p, ec) && ec) fail("output.dir {}: --overwrite cannot remove {}: {}", dir, p.string(), ec.message());
      };
      for (const auto& f : run_files()) remove(root / f);
      for (const auto& f : earlier)
        if (f.rfind("checkpoints/", 0) == 0) remove(root / f);
      spdlog::warn("output.dir {}: --overwrite: removed the earlier run ({} files)", dir, earlier.size());
    }
  }
  make_writable_directory(ckpt.string(), "the checkpoint directory");
}

}  // namespace packrat
