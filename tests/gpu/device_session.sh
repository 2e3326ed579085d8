#!/usr/bin/env bash
# One session on a machine with an NVIDIA GPU, from a bundle built elsewhere (tests/gpu/bundle.sh):
#   1. the CUDA kernel suite (every op the simulator builds, checked against the reference),
#   2. `tpsim calibrate kernels --backend cuda` within BUDGET seconds,
#   3. `tpsim replay --backend cuda` of whole training steps, predicted from that profile and from
#      the shipped (table-fitted) profile of the same device.
# Each step has its own time limit and a failing step does not stop the others; every output goes
# to OUT_DIR; no step starts after DEADLINE seconds from the start.
# Usage: tests/gpu/device_session.sh BUNDLE_DIR OUT_DIR [BUDGET_SECONDS] [DEADLINE_SECONDS]   (also writes OUT_DIR.tgz)
set -u
bundle=$(cd "$1" && pwd)
out=$2
budget=${3:-240}
deadline=${4:-900}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
export TPSIM_DATA_DIR=$PWD/data

# cuBLASLt is loaded with dlopen (kernels/cuda/cublaslt_lazy.cpp): find the machine's copy.
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$bundle/lib${lt:+:$(dirname "$lt")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  echo "cuBLASLt: ${lt:-not found}"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

step() {  # step NAME SECONDS COMMAND...: run with a limit, log to OUT/NAME.txt, say how it ended
  local name=$1 limit=$2; shift 2
  if ((SECONDS + 10 > deadline)); then echo "== $name: not started (deadline)" | tee -a "$out/steps.txt"; return; fi
  ((SECONDS + limit > deadline)) && limit=$((deadline - SECONDS))
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$out/steps.txt"
  tail -n 25 "$out/$name.txt"
}

# The cuBLASLt probe (tests/gpu/lt_probe.cu), with cuBLASLt's own log of why it refuses what it
# refuses (CUBLASLT_LOG_MASK: errors, traces, hints, info, API).
[ -x "$bundle/lt_probe" ] && CUBLASLT_LOG_MASK=31 CUBLASLT_LOG_FILE="$out/cublaslt.log" step probe 60 "$bundle/lt_probe"
step suite 240 "$bundle/test_kernels_gpu" --run_test=cuda --log_level=test_suite --report_level=short
step calibrate $((budget + 90)) "$bundle/tpsim" calibrate kernels --backend cuda --budget "$budget" --out "$out/profile.json"

# Whole steps of catalogue models on one GPU, from the fresh profile and from the shipped one.
replays=(
  "--model 125m --seq 2048 --micro-batch 8"
  "--model 350m --seq 2048 --micro-batch 4 --ckpt"
  "--model 760m --seq 4096 --micro-batch 2"
  "--model 1b --seq 2048 --micro-batch 2 --ckpt"
  "--model 3b --seq 8192 --micro-batch 1 --layers 8"
)
i=0
for r in "${replays[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  [ -f "$out/profile.json" ] && step "replay${i}_calibrated" 90 "$bundle/tpsim" replay --backend cuda $r --profile "$out/profile.json"
  # shellcheck disable=SC2086
  step "replay${i}_shipped" 90 "$bundle/tpsim" replay --backend cuda $r
done

# Everything in one file beside OUT_DIR too: a lent machine may hand back only a few files.
tar czf "${out%/}.tgz" -C "$(dirname "$out")" "$(basename "$out")"
