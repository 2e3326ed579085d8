#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer) and
# runs each for a bounded time, seeded with the real files in data/ and with every input that ever
# crashed one (tests/fuzz/regressions/<target>/). Fails on any crash, hang or sanitizer report;
# a new crashing input is kept in tests/fuzz/crashes/<target>/ to be added to the regressions.
# Usage: tests/fuzz/run.sh [seconds per target, default 30]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-30}
# The sanitizer build test.sh makes (the same options: configuring it again changes nothing).
build=${FUZZ_BUILD_DIR:-build-asan}
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTPSIM_SANITIZE=ON -DTPSIM_FUZZ=ON \
  -DTPSIM_CUDA=OFF -DTPSIM_HIP=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz_measured_table fuzz_models_yaml fuzz_train_yaml fuzz_device_yaml fuzz_profile_json fuzz_hf_config >/dev/null

declare -A seeds=(
  [fuzz_measured_table]="data/measured"
  [fuzz_models_yaml]="data/models"
  [fuzz_train_yaml]="data/examples"
  [fuzz_device_yaml]="data/devices"
  [fuzz_profile_json]="data/profiles"
  [fuzz_hf_config]="data/models/hf"
)
# Runs one target; its report goes to stderr only on failure.
run_target() {
  local target=$1 corpus log regressions crashes
  corpus=$(mktemp -d)
  log="$corpus.log"
  find "${seeds[$target]}" -type f -exec cp {} "$corpus"/ \;
  regressions="tests/fuzz/regressions/$target"
  [ -d "$regressions" ] && cp "$regressions"/* "$corpus"/ 2>/dev/null || true
  crashes="tests/fuzz/crashes/$target"
  mkdir -p "$crashes"
  local ok=0
  if ! TPSIM_DATA_DIR="$PWD/data" "$build/tests/fuzz/$target" "$corpus" -max_total_time="$seconds" -timeout=10 \
       -rss_limit_mb=4096 -artifact_prefix="$crashes/" -print_final_stats=1 2> "$log"; then
    echo "fuzz: $target FAILED; the input is in $crashes/ and the report follows" >&2
    tail -40 "$log" >&2
    ok=1
  else
    grep -E "^stat::number_of_executed_units" "$log" | sed "s/^/fuzz: $target /"
  fi
  rmdir "$crashes" 2>/dev/null || true
  rm -rf "$corpus" "$log"
  return $ok
}

# The targets run side by side, one per core.
status=0
running=0
for target in "${!seeds[@]}"; do
  echo "fuzz: $target for ${seconds}s"
  run_target "$target" &
  running=$((running + 1))
  if ((running >= $(nproc))); then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while ((running > 0)); do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
