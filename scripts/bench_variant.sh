#!/usr/bin/env bash
# Builds packrat_bench of another revision (a branch with a kernel to try) beside this one's, for a
# side-by-side run on a lent GPU (scripts/device_check.sh's `ab` phase), so that one call of the
# device tool measures both in the same run:
#
#   scripts/bench_variant.sh REV [BUILD_DIR]    (default BUILD_DIR: build; the checkout must be clean)
#   then strip the usual binaries into build-dev/bin as the README says, and bundle build-dev.
#
# It checks REV out, builds packrat_bench in BUILD_DIR, strips it to build-dev/bin/packrat_bench.variant,
# and goes back to the branch it started from and rebuilds packrat_bench there (only the files the
# two revisions differ in are recompiled).
set -euo pipefail
rev=${1:?usage: scripts/bench_variant.sh REV [BUILD_DIR]}
build=${2:-build}
cd "$(git rev-parse --show-toplevel)"
git diff --quiet && git diff --cached --quiet || { echo "bench_variant: the checkout has changes: commit or stash them" >&2; exit 2; }
start=$(git symbolic-ref --short -q HEAD || git rev-parse HEAD)
trap 'git checkout -q "$start"' EXIT
git checkout -q "$rev"
cmake --build "$build" -j"$(nproc)" --target packrat_bench
mkdir -p build-dev/bin
strip -o build-dev/bin/packrat_bench.variant "$build/bin/packrat_bench"
echo "$rev $(git rev-parse --short HEAD)" > build-dev/bin/packrat_bench.variant.rev
git checkout -q "$start"
trap - EXIT
cmake --build "$build" -j"$(nproc)" --target packrat_bench
echo "bench_variant: build-dev/bin/packrat_bench.variant is $rev; $start rebuilt"
