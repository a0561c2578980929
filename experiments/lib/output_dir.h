#pragma once
// The run directory, checked before anything is written or trained: results are never deleted
// unless the user asks, and filesystem problems are reported with the path up front instead of
// after an epoch of training.
#include <string>
#include <vector>

namespace packrat {

// What an earlier run left in `dir`: the names of its metrics files, a non-empty train.log and
// its checkpoints ("metrics.csv", "checkpoints/epoch_0002.safetensors", ...); empty if none.
std::vector<std::string> earlier_run_files(const std::string& dir);

// Creates `dir` if needed; throws packrat::Error naming it when it is a file or cannot be
// created or written to. `what` names it in the message ("output.dir").
void make_writable_directory(const std::string& dir, const std::string& what);

// Throws packrat::Error naming the path when `dir` is a file or cannot be created or written to,
// when its `checkpoints` is not a directory or a checkpoint name there is not a regular file,
// when `resume` finds no checkpoint, and when a fresh run (not `resume`) finds an earlier run
// there and `overwrite` is not set (the message names the files and the ways out: --resume,
// another output.dir, --overwrite). With `overwrite` the earlier run's files are removed.
// Creates `dir` and `dir`/checkpoints. Idempotent.
void prepare_output_dir(const std::string& dir, bool resume, bool overwrite);

}  // namespace packrat
