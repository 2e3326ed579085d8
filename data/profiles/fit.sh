#!/usr/bin/env bash
# Regenerates the shipped profiles in this folder from the reasoned defaults (defaults/) and the
# seed's measured tables (../measured/). Each profile records the command that made it.
#   a100_40gb, a100_80gb, h100_80gb: fitted to their own tables (H100 with its FP8 table too)
#   h200_141gb, mi250x, mi300x, v100_32gb: no table; system-level parameters carried over from a
#     fit to all tables, kernel-level ones from their defaults (tpsim calibrate table --transfer)
set -euo pipefail
cd "$(dirname "$0")/../.."
tpsim=${TPSIM:-build/cli/tpsim}
m=data/measured
"$tpsim" calibrate table --table $m/a100_40gb_bf16.md --device a100_40gb --out data/profiles/a100_40gb.json
"$tpsim" calibrate table --table $m/a100_80gb_bf16.md --device a100_80gb --out data/profiles/a100_80gb.json
"$tpsim" calibrate table --table $m/h100_80gb_bf16.md --table $m/h100_80gb_fp8.md --device h100_80gb \
  --out data/profiles/h100_80gb.json
for device in h200_141gb mi250x mi300x v100_32gb; do
  "$tpsim" calibrate table --table $m/a100_40gb_bf16.md --table $m/a100_80gb_bf16.md --table $m/h100_80gb_bf16.md \
    --table $m/h100_80gb_fp8.md --device "$device" --transfer --out "data/profiles/$device.json"
done
