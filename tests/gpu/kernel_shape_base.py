#!/usr/bin/env python3
"""Writes a base profile: the device's reasoned defaults with the GEMM shape terms (K ramp, tile,
tile intensity, fixed cost) of a kernel run put in, each marked `kernel`. The experiment of
data/kernel-runs/README.md ("The kernel-measured GEMM shape in the table fit") gives it to
`tpsim validate --cv ... --profile OUT`.
Usage: tests/gpu/kernel_shape_base.py DEFAULTS.json KERNEL_RUN_PROFILE.json OUT.json"""
import copy
import json
import sys

defaults, kernel_run, out = sys.argv[1:4]
base = json.load(open(defaults))
measured = json.load(open(kernel_run))['parameters']
for name in ['gemm_k_half', 'gemm_tile_m', 'gemm_tile_n', 'gemm_tile_intensity_half', 'gemm_overhead_s']:
    base['parameters'][name] = copy.deepcopy(measured[name])
    base['parameters'][name]['detail'] = kernel_run + ': ' + measured[name]['detail']
with open(out, 'w') as f:
    json.dump(base, f, indent=2)
    f.write('\n')
