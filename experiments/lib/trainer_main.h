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
#include <string>
#include <utility>
#include <vector>

namespace packrat {

// Parses the trainer's arguments (argv[0] is the program) and runs what they ask for. Returns
// the exit code: 0 done, 2 bad input (config, data, arguments, out of memory, non-finite loss),
// 1 other failures; errors are printed as "<program>: error: ..." on stderr. On its first call
// in a process with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set, it re-executes the program
// with openmp_waiting_defaults (so the program's main runs twice: register schemes before calling).
int run_trainer(int argc, char** argv);

// How long an idle OpenMP thread spins before it sleeps (libgomp's GOMP_SPINCOUNT: about 100 000
// rounds a millisecond, so some 30 us). A step opens hundreds of parallel regions, many of them
// short (the codecs' and pointwise loops'): sleeping at once (OMP_WAIT_POLICY=passive) pays a
// wake-up at each. On an Intel Xeon VM the short spin made six shipped configs' steps 7-48%
// faster (EfficientNet-small 740 -> 926 img/s, the GPT 283 -> 419) and came within 7% of
// libgomp's default (300 000 rounds, some 3 ms); beside one busy process it is 1-27% slower than
// sleeping at once, where the default spin was up to 7.6x slower (a thread spins while its sibling
// waits for the core), and 10 000 rounds 13-23% slower. docs/measurements-cpu.md, "OpenMP threads
// spin briefly before they sleep".
inline constexpr int kOpenmpSpinCount = 3000;

// The variables to set when the caller chose neither (the arguments are their values, or null):
// OMP_WAIT_POLICY=passive and GOMP_SPINCOUNT=kOpenmpSpinCount; nothing when either is set.
std::vector<std::pair<std::string, std::string>> openmp_waiting_defaults(const char* wait_policy, const char* spin_count);

// Re-executes the program once with openmp_waiting_defaults (libgomp reads them only when it is
// loaded, before main). Other programs that train (build/bin/sweep) call it first thing in main.
void prefer_short_openmp_spinning(char** argv);

}  // namespace packrat
