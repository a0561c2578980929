#!/usr/bin/env bash
# Installs the Debian packages packrat needs; does nothing when all are present.
#   scripts/setup.sh           # build, test and train
#   scripts/setup.sh --torch   # also the PyTorch reference for bench/compare_torch.py
#                              # (Debian's python3-torch and python3-torchvision)
#   scripts/setup.sh --fuzz    # also clang and its libFuzzer / sanitizer runtimes (scripts/fuzz.sh)
set -euo pipefail
packages=(build-essential cmake pkg-config libdnnl-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
          libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libstb-dev libcurl4-openssl-dev
          nlohmann-json3-dev libarchive-dev libjpeg-dev nettle-dev gnuplot-nox jq dataset-fashion-mnist fortunes
          libopenmpi-dev openmpi-bin)  # MPI: data-parallel training (PACKRAT_MPI=AUTO builds without it)
for arg in "$@"; do
  case "$arg" in
    --torch) packages+=(python3-torch python3-torchvision) ;;
    --fuzz) packages+=(clang libclang-rt-14-dev) ;;
    *) echo "setup: unknown option '$arg' (known: --torch, --fuzz)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
