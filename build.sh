#!/usr/bin/env bash
# Installs what tpsim needs (Debian packages; chromium renders the plots in the tests) and builds
# it into build/
# Usage: ./build.sh            (Release build with tests)
#        BUILD_DIR=out ./build.sh -DTPSIM_SANITIZE=ON   (extra CMake options pass through)
set -euo pipefail
cd "$(dirname "$0")"

# hipcc, libamdhip64-dev and rocm-device-libs build the HIP backend (kernels/hip; about 70 MB).
packages=(cmake g++ make libeigen3-dev libceres-dev libcli11-dev libboost-test-dev libyaml-cpp-dev nlohmann-json3-dev libopenmpi-dev openmpi-bin hipcc libamdhip64-dev rocm-device-libs chromium)
# EXTRA_PACKAGES: more Debian packages a caller needs (test.sh: clang and libFuzzer).
read -r -a extra <<< "${EXTRA_PACKAGES:-}"
packages+=("${extra[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "build.sh: installing ${missing[*]}" >&2
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build_dir="${BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
