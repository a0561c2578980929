// trainer --config FILE [--set key=value ...] [--resume RUN_DIR] [--memory-report-only]
//         [--benchmark STEPS] [--find-max-batch BYTES] [--stop-after-epoch N] [--overwrite]
// Exit codes: 0 done, 2 bad input (config, data, arguments, out of memory, non-finite loss), 1 other failures.
// The whole main is a library function (experiments/lib/trainer_main.h), so that a program of
// your own can register a storage scheme first and then be this trainer (examples/my_scheme/).
#include "experiments/lib/trainer_main.h"

int main(int argc, char** argv) { return packrat::run_trainer(argc, argv); }
