#!/usr/bin/env bash
# Regenerates the shipped profiles in this folder from the reasoned defaults (defaults/) and the
# measured tables (../measured/). Each profile records the command that made it.
#   a100_40gb, a100_80gb, h100_80gb: fitted to their own tables (H100 with its FP8 table and llm-foundry's 125m and 350m H100 runs too)
#   every other device: no table; transferred from its nearest measured sibling (same vendor and
#     architecture first, then the nearest datasheet), changing only what the datasheets change,
#     with the sibling's interval widened by that distance (tpsim calibrate transfer; docs/hardware.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
tpsim=${TPSIM:-build/cli/tpsim}
m=data/measured
# The interval's widening beyond the fitted rows is measured on the other devices' tables (how the
# fit extrapolates in model size, GPUs, sequence and micro-batch, held out per device): the fitted
# table alone has too few rows far from the others, and the coverage validate --cv extremes then
# reports on the fitted table is held out (docs/accuracy.md "Interval coverage").
a40=$m/a100_40gb_bf16.md a80=$m/a100_80gb_bf16.md h=$m/h100_80gb_bf16.md h8=$m/h100_80gb_fp8.md
"$tpsim" calibrate table --table $a40 --device a100_40gb --widening-table $a80 --widening-table $h \
  --widening-table $h8 --out data/profiles/a100_40gb.json
"$tpsim" calibrate table --table $a80 --device a100_80gb --widening-table $a40 --widening-table $h \
  --widening-table $h8 --out data/profiles/a100_80gb.json
# H100 with the 125m and 350m rows of the same campaign (h100_80gb_bf16_small.md): without them the
# table's smallest model is 760m, and the fit cannot tell the cross-entropy from the rest of the step.
hs=$m/h100_80gb_bf16_small.md
"$tpsim" calibrate table --table $h --table $h8 --table $hs --device h100_80gb --widening-table $a40 \
  --widening-table $a80 --out data/profiles/h100_80gb.json
for device in h200_141gb v100_32gb mi250x mi300x mi325x mi355x b200 gb200 b300 gb300; do
  "$tpsim" calibrate transfer --device "$device" --out "data/profiles/$device.json"
done
