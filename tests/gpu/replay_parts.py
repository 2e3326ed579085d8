#!/usr/bin/env python3
"""Splits `tpsim replay` markdown output into attention, GEMMs and memory-bound ops: the time of
each part measured (ops alone) and predicted, block ops scaled as replay scales them when fewer
blocks ran. Usage: tests/gpu/replay_parts.py REPLAY.txt... (data/kernel-runs/README.md)."""
import re
import sys

for path in sys.argv[1:]:
    text = open(path).read()
    rows = [line.split('|') for line in text.splitlines() if re.match(r'^\| \d+ \|', line)]
    if not rows:
        print(f"{path}: no op table")
        continue
    m = re.search(r'scaled by (\d+)/(\d+)', text)
    scale = int(m.group(1)) / int(m.group(2)) if m else 1.0
    parts = {}
    for r in rows:
        part, op, shape = r[2].strip(), r[4].strip(), r[5].strip()
        alone, predicted = float(r[6]), float(r[8])
        s = scale if part.startswith('block') else 1.0
        kind = 'attention' if '.flash.' in op else ('gemm' if re.match(r'^\d+x\d+x\d+', shape) else 'membound')
        p = parts.setdefault(kind, [0.0, 0.0])
        p[0] += alone * s
        p[1] += predicted * s
    rest = [sum(v[i] for k, v in parts.items() if k != 'attention') for i in (0, 1)]
    cells = [f"{k} {v[0] * 1e3:.1f}/{v[1] * 1e3:.1f} ms ({100 * (v[1] / v[0] - 1):+.1f}%)" for k, v in sorted(parts.items())]
    cells.append(f"without attention {rest[0] * 1e3:.1f}/{rest[1] * 1e3:.1f} ms ({100 * (rest[1] / rest[0] - 1):+.1f}%)")
    print(f"{path}: " + ", ".join(cells))
