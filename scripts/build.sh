#!/usr/bin/env bash
# Installs what is missing, then configures and builds packrat (Release) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release 
cmake --build build -j"$(nproc)"
