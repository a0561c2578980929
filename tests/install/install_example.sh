#!/usr/bin/env bash
# packrat as an installed library, as a user outside the tree builds on it: `cmake --install` the
# build into a scratch prefix, configure and build examples/my_model from its own CMakeLists.txt
# against that prefix only (find_package(packrat)), and run the program on the quickstart config
# (--memory-report-only, one step on synthetic inputs).
#   tests/install/install_example.sh [BUILD_DIR]     (CTest runs it as install.example)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
scratch=$(mktemp -d /tmp/packrat_install.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build" --prefix "$scratch/prefix" >"$scratch/install.log"
cp -r "$root/examples/my_model" "$scratch/my_model"  # outside the tree: nothing but the prefix to find
cmake -S "$scratch/my_model" -B "$scratch/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  >"$scratch/configure.log" || { cat "$scratch/configure.log"; exit 1; }
cmake --build "$scratch/build" -j"$(nproc)" >"$scratch/build.log" 2>&1 || { tail -30 "$scratch/build.log"; exit 1; }
cd "$scratch"
OMP_NUM_THREADS=2 "$scratch/build/my_model" --config "$root/configs/quickstart.yaml" --set model.arch=small_cnn \
  --set 'model.stem=""' --set data.batch_size=8 --memory-report-only --set output.dir="$scratch/run" | tail -2
echo "install.example: examples/my_model built against the installed packrat and ran"
