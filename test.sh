#!/usr/bin/env bash
# The whole test run, as CI runs it (.ci/run): installs what it needs (apt), then
#   1. the Release build (build/), the sources' format against .clang-format (clang-format
#      --dry-run; `clang-format -i FILE` fixes one), clang-tidy's bugprone and performance checks
#      on model/ (model/.clang-tidy names what it leaves out and why), and every suite in the build;
#   2. the same suites built with AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/,
#      clang at -O1, which compiles it in a third of GCC -O3's time; CPU only: the CUDA and HIP
#      objects come from nvcc and hipcc, which these sanitizers do not instrument, and their device
#      suites skip without a GPU anyway);
#   3. each reader's libFuzzer target, built in the same tree, for FUZZ_SECONDS (default 20)
#      seconds (tests/fuzz/run.sh).
# Any failure, sanitizer report or fuzzer crash fails the run.
set -euo pipefail
cd "$(dirname "$0")"
jobs=$(nproc)
export EXTRA_PACKAGES="clang libclang-rt-14-dev clang-format clang-tidy"

./build.sh -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
# Every C++ and CUDA source as .clang-format lays it out (clang-format 14, Debian 12's).
git ls-files -z '*.cpp' '*.hpp' '*.cu' '*.cuh' | xargs -0 clang-format --dry-run --Werror
# model/ clean under clang-tidy (clang-tidy 14), one file per process.
git ls-files -z 'model/*.cpp' | xargs -0 -n 1 -P "$jobs" clang-tidy -p build --quiet --extra-arg=-Wno-ignored-optimization-argument
ctest --test-dir build --output-on-failure -j "$jobs"

CC=clang CXX=clang++ BUILD_DIR=build-asan ./build.sh -DTPSIM_SANITIZE=ON -DTPSIM_FUZZ=ON -DTPSIM_CUDA=OFF -DTPSIM_HIP=OFF
# Open MPI's own allocations are not freed at exit: leak checking would report them, not ours.
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"

tests/fuzz/run.sh "${FUZZ_SECONDS:-20}"
