#pragma once
// The trainer's whole main as a library function: a program of your own registers its storage
// schemes (quant/policy/rule_policy.h: register_scheme) and then hands its command line over:
//
//   int main(int argc, char** argv) {
//     packrat::register_scheme("bf16", make_bf16_store);
//     return packrat::run_trainer(argc, argv);  // every trainer flag; the config may use "bf16"
//   }
//
// (examples/my_scheme/ is such a program.) build/bin/trainer is exactly this with no scheme of
// its own.
namespace packrat {

// Parses the trainer's arguments (argv[0] is the program) and runs what they ask for. Returns
// the exit code: 0 done, 2 bad input (config, data, arguments, out of memory, non-finite loss),
// 1 other failures; errors are printed as "<program>: error: ..." on stderr. On its first call
// in a process without OMP_WAIT_POLICY set, it re-executes the program with
// OMP_WAIT_POLICY=passive (so the program's main runs twice: register schemes before calling).
int run_trainer(int argc, char** argv);

// Re-executes the program once with OMP_WAIT_POLICY=passive unless the caller chose a policy
// (spinning OpenMP threads slow every step several times over on a shared machine). Other
// programs that train (build/bin/sweep) call it first thing in main.
void prefer_passive_openmp_waiting(char** argv);

}  // namespace packrat
