#!/bin/sh
# Predicts each published data-parallel-only measurement of throughput.csv (TP = PP = CP = EP = 1,
# on a device tpsim ships a profile for) with the shipped profiles, and prints measured against
# predicted tokens/s per GPU. None of these rows was used to fit anything: every error is held out.
#
#   data/published/compare.sh [TPSIM]        (default build/cli/tpsim; run from the repository root)
#
# What tpsim cannot yet represent is said in the Notes column rather than silently changed:
#   - torchtitan's "selective" activation checkpointing (per-op or every other layer) is not
#     Megatron-LM's recompute of the attention core that `--ckpt selective` models; such rows are
#     predicted with --ckpt selective and marked.
#   - torch.compile rows are predicted with --compile (Composer's compiled blocks).
#   - the framework is predicted as llm-foundry/Composer FSDP (issue 15 adds torchtitan and Megatron).
set -eu
TPSIM=${1:-build/cli/tpsim}
DIR=$(dirname "$0")
[ -x "$TPSIM" ] || { echo "compare.sh: $TPSIM is not an executable (build first: ./build.sh)" >&2; exit 2; }

echo "| Source | Model | GPU | GPUs | SeqLen | Batch (tokens) | Micro | Precision | Ckpt | Measured (T/s/GPU) | tpsim (T/s/GPU) | Error | Notes |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
tail -n +2 "$DIR/throughput.csv" | while IFS= read -r line; do
  # Only rows whose first 20 fields are plain (no quoted commas); the Notes column is not read.
  fields=$(printf '%s\n' "$line" | cut -d, -f1-20)
  case "$fields" in *\"*) continue ;; esac
  IFS=, read -r src model fw gpu n seq gbt mb prec ckpt compile dp shard tp pp cp ep tps tflops mfu <<EOF
$fields
EOF
  [ "$tp" = 1 ] && [ "$pp" = 1 ] && [ "$cp" = 1 ] && [ "$ep" = 1 ] || continue
  [ -f "data/profiles/$gpu.json" ] || continue
  [ -n "$seq" ] && [ -n "$gbt" ] && [ -n "$mb" ] && [ -n "$tps" ] || continue
  notes=""
  case "$prec" in
    bf16) p=amp_bf16 ;;
    fp8) p=amp_fp8 ;;
    *) continue ;;  # precision not stated: nothing to predict
  esac
  case "$ckpt" in
    none | full) k=$ckpt ;;
    selective*) k=selective; notes="torchtitan $ckpt checkpointing, predicted as attention-core recompute" ;;
    *) k=none; notes="checkpointing not stated: predicted without" ;;
  esac
  flags=""
  [ "$compile" = on ] && flags="--compile" && notes="${notes:+$notes; }torch.compile"
  notes="${notes:+$notes; }$fw"
  batch=$((gbt / seq))
  out=$("$TPSIM" predict --model "$model" --device "$gpu" --gpus "$n" --seq "$seq" --global-batch "$batch" \
        --micro-batch "$mb" --precision "$p" --ckpt "$k" $flags --format csv 2>/dev/null | tail -n 1) || {
    echo "| $src | $model | $gpu | $n | $seq | $gbt | $mb | $prec | $ckpt | $tps | (tpsim refused) | | $notes |"
    continue
  }
  pred=$(printf '%s\n' "$out" | cut -d, -f13)
  fits=$(printf '%s\n' "$out" | cut -d, -f21)
  if [ "$fits" = yes ]; then
    err=$(awk -v p="$pred" -v m="$tps" 'BEGIN { printf "%+.1f%%", 100 * (p - m) / m }')
  else
    pred="does not fit ($(printf '%s\n' "$out" | cut -d, -f24) GiB)"
    err=""
  fi
  echo "| $src | $model | $gpu | $n | $seq | $gbt | $mb | $prec | $ckpt | $tps | $pred | $err | $notes |"
done
