#!/usr/bin/env bash
# Builds packrat with AddressSanitizer and UndefinedBehaviorSanitizer into build-asan/ and runs the
# whole test suite under them; exits non-zero on the first sanitizer report or failing test.
# CUDA is left out: ASan cannot see device memory (compute-sanitizer is the tool for kernels), and
# the CUDA runtime's host mappings need protect_shadow_gap=0, which weakens ASan for the rest.
#   scripts/sanitize.sh                 # everything
#   scripts/sanitize.sh 'DataTar.*'     # a gtest filter (run as given, leak checks on)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -O1 -g"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPACKRAT_NATIVE=ON -DPACKRAT_SANITIZE=ON -DPACKRAT_CUDA=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-asan --target packrat_tests -j"$(nproc)"
# detect_leaks: the suite must not leak; halt_on_error: one report fails the run.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
if [[ $# -gt 0 ]]; then
  build-asan/bin/packrat_tests --gtest_filter="$1"
  exit
fi
build-asan/bin/packrat_tests --gtest_filter='-DistributedTrainer.*'
# The data-parallel runs start the trainer under mpirun: Open MPI's own start-up allocations are
# never freed (ompi_op_base_op_select and its plugins), so LeakSanitizer is off in those
# processes; every other check stays on.
ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}" build-asan/bin/packrat_tests --gtest_filter='DistributedTrainer.*'
