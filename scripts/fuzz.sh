#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang into build-fuzz/ and runs them, one at a time,
# each from a seed corpus made from the test fixtures (build-fuzz/seeds/<target>/).
#   scripts/fuzz.sh                 # every target, 60 seconds each
#   scripts/fuzz.sh tar 600         # one target (config idx cifar image_folder safetensors tar), 10 minutes
#   scripts/fuzz.sh all 0           # build every target and run each once over its seeds (CI does this)
# New interesting inputs go to build-fuzz/corpus/<target>/, crashers to build-fuzz/crashes/<target>/;
# exits non-zero when a target crashed. Make each crasher a regression test in tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
all=(config idx cifar image_folder safetensors tar)
targets=("${all[@]}")
if [ $# -ge 1 ] && [ "$1" != all ]; then targets=("$1"); fi
seconds=${2:-60}
./scripts/setup.sh --fuzz
# The code outside the parsers comes from the normal Release build's library.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target packrat -j"$(nproc)"
CXX=clang++ cmake -S . -B build-fuzz -DPACKRAT_FUZZ=ON -DCMAKE_BUILD_TYPE=None >/dev/null
cmake --build build-fuzz --target fuzz_seeds "${targets[@]/%/_fuzz}" -j"$(nproc)"
rm -rf build-fuzz/seeds && build-fuzz/bin/fuzz_seeds build-fuzz/seeds .
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
export OMP_NUM_THREADS=1
status=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/crashes/$t"
  start=$(date +%s)
  if [ "$seconds" = 0 ]; then  # each seed once: the target builds, links and parses its seeds
    echo "fuzz: $t over its seeds"
    build-fuzz/bin/"${t}_fuzz" -runs=0 -timeout=20 -rss_limit_mb=4096 -artifact_prefix="build-fuzz/crashes/$t/" \
      "build-fuzz/seeds/$t" || status=1
  else
    echo "fuzz: $t for ${seconds}s"
    build-fuzz/bin/"${t}_fuzz" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/crashes/$t/" "build-fuzz/corpus/$t" "build-fuzz/seeds/$t" || status=1
  fi
  echo "fuzz: $t ran $(($(date +%s) - start))s; crashers: $(ls "build-fuzz/crashes/$t" | wc -l)"
done
exit $status
