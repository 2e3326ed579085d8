#!/usr/bin/env bash
# Runs every command of commands.txt with the tpsim given and compares its output, byte for byte,
# with the NAME.out kept beside this script (and any file it writes under @OUT@ with NAME.FILE).
#   tests/golden/check.sh build/cli/tpsim            compare; exit 1 and a diff on the first change
#   tests/golden/check.sh build/cli/tpsim --update   rewrite the kept outputs
# Run from anywhere; the commands run in the repository root (they name data/ files).
# TPSIM_GOLDEN_SKIP: names of commands not to run (the sanitizer build's ctest skips the
# cross-validation, minutes there; test_table_fit runs its code under the sanitizers on part of a table).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tpsim=$(realpath "$1")
update=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
failed=0
while read -r name args; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  [[ " ${TPSIM_GOLDEN_SKIP:-} " == *" $name "* && "$update" != --update ]] && continue
  out="$work/$name"
  mkdir -p "$out"
  # shellcheck disable=SC2086
  set -- ${args//@OUT@/$out}
  "$tpsim" "$@" > "$out/stdout" 2> "$out/stderr"
  rc=$?
  {
    cat "$out/stdout"
    echo "--- stderr"
    grep -v '^evaluated [0-9]* configurations in ' "$out/stderr"
    echo "--- exit $rc"
  } > "$work/$name.out"
  files=("$work/$name.out")
  for f in "$out"/*; do
    case "$(basename "$f")" in stdout|stderr) continue ;; esac
    cp "$f" "$work/$name.$(basename "$f")"
    files+=("$work/$name.$(basename "$f")")
  done
  for f in "${files[@]}"; do
    kept="$here/$(basename "$f")"
    if [[ "$update" == --update ]]; then
      cp "$f" "$kept"
    elif ! cmp -s "$f" "$kept"; then
      echo "golden: $name: $(basename "$f") differs from the kept output:"
      diff "$kept" "$f" | head -20
      failed=1
    fi
  done
done < "$here/commands.txt"
if [[ "$update" == --update ]]; then echo "golden: outputs rewritten in $here"; exit 0; fi
[[ $failed == 0 ]] && echo "golden: every output is byte-identical"
exit $failed
