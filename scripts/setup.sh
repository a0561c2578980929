#!/usr/bin/env bash
# Installs the Debian packages packrat needs; does nothing when all are present.
set -euo pipefail
packages=(build-essential cmake pkg-config libdnnl-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
          libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libstb-dev libcurl4-openssl-dev
          nlohmann-json3-dev libarchive-dev           gnuplot-nox dataset-fashion-mnist)
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
