#pragma once
// The run directory, checked before anything is written or trained: results are never deleted
// unless the user asks, and filesystem problems are reported with the path up front instead of
// after an epoch of training.
#include <string>
#include <vector>

#include "experiments/lib/dir_lock.h"

namespace packrat {

// What an earlier run left in `dir`: the names of its metrics files, a non-empty train.log and
// its checkpoints ("metrics.csv", "checkpoints/epoch_0002.safetensors", ...); empty if none.
std::vector<std::string> earlier_run_files(const std::string& dir);

// Creates `dir` if needed; throws packrat::Error naming it when it is a file or cannot be
// created or written to. `what` names it in the message ("output.dir").
void make_writable_directory(const std::string& dir, const std::string& what);

// Throws packrat::Error naming the path when `dir` is a file or cannot be created or written to,
// when its `checkpoints` is not a directory or a checkpoint name there is not a regular file,
// when `resume` finds no checkpoint, and when a fresh run (not `resume`) finds
// an earlier run there and `overwrite` is not set (the message names the files and the ways out:
// --resume, another output.dir, --overwrite). Creates `dir` when missing; changes nothing else.
void check_output_dir(const std::string& dir, bool resume, bool overwrite);

// For a measurement that writes `outputs` into `dir` (--gradient-fidelity): throws like a fresh
// run's check when `dir` holds an earlier run or earlier `outputs`, unless `overwrite`; returns
// the files found. `flag` names the measurement in the message.
std::vector<std::string> check_measurement_dir(const std::string& dir, const std::vector<std::string>& outputs,
                                               bool overwrite, const std::string& flag);

// check_output_dir, then (once every other check of the run has passed too) removes the earlier
// run's files with `overwrite` and creates `dir`/checkpoints. Idempotent.
void prepare_output_dir(const std::string& dir, bool resume, bool overwrite);

// Removes every file a run writes into `dir` (metrics, log, config.yaml, reports, plots,
// checkpoints) except those named in `keep`; throws naming a file that cannot be removed.
void remove_run_files(const std::string& dir, const std::vector<std::string>& keep = {});

// Creates `dir` when missing and takes its DirectoryLock for as long as the result lives: a
// second process writing into the same run directory is refused, naming the holder's pid.
DirectoryLock lock_output_dir(const std::string& dir);

// Throws when `file` (the user's config) is one of the files a run writes into `dir`, which the
// run would overwrite (or --overwrite remove).
void check_not_a_run_file(const std::string& dir, const std::string& file);

// A leading "~" or "~user" expanded as a shell does ("~/runs/x" -> "$HOME/runs/x"); other paths
// unchanged. Throws naming `what` when it cannot be expanded (HOME unset, no such user).
std::string expand_home(const std::string& path, const std::string& what);

}  // namespace packrat
