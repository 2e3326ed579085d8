#!/usr/bin/env bash
# Packs what tests/gpu/device_session.sh runs into DEST: the tpsim binary and the CUDA kernel suite
# of BUILD_DIR, with every shared library they load except the C/C++ runtime and the GPU driver,
# which the GPU machine has (its own copies are the ones that match it). cuBLASLt is not linked
# (it is loaded with dlopen) and is found on the GPU machine. Build BUILD_DIR without NCCL and HIP
# to keep the bundle small:
#   cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTPSIM_HIP=OFF -DTPSIM_NCCL=OFF -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu -j --target tpsim test_kernels_gpu
# Usage: tests/gpu/bundle.sh BUILD_DIR DEST
set -euo pipefail
build=$(realpath "$1")
dest=$(realpath -m "$2")
cd "$(dirname "$0")/../.."
rm -rf "$dest"
mkdir -p "$dest/lib"
cp "$build/cli/tpsim" "$build/tests/test_kernels_gpu" "$dest/"
for exe in "$dest/tpsim" "$dest/test_kernels_gpu"; do
  ldd "$exe" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libstdc++.so*|libgcc_s.so*|libcuda.so*|ld-linux*) ;;
    *) cp -L "$lib" "$dest/lib/" ;;
  esac
done
# The cuBLASLt probe, where nvcc is at hand.
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
if [ -x "$nvcc" ]; then
  "$nvcc" -O2 -arch=sm_90 -I. tests/gpu/lt_probe.cu -o "$dest/lt_probe" -lcublasLt
fi
du -sh "$dest"
