#!/usr/bin/env bash
# Reproduces the measurements of docs/performance.md; results go under outputs/perf/ (git-ignored).
# Takes about 6 minutes on a 2-core machine. Measure on a quiet machine: the bench records the
# load average at its start and end in bench.json (load_average_start / load_average_end).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=outputs/perf/$(date +%Y-%m-%d_%H-%M-%S)
mkdir -p "$OUT"

# 1. Before/after: naive, xla (the pure-JAX fused path, as before this work), native, instrumented;
#    D2Q9 float32 periodic boxes and the cylinder, all in one run (one bandwidth measurement).
$PY -m lbm bench "sizes=[256,512,1024,2048]" hydra.run.dir="$OUT/sizes" | tee "$OUT/sizes.txt"

# 2. Beyond every cache: a 4096^2 box (604 MB) against 1 GiB bandwidth arrays.
$PY -m lbm bench "sizes=[4096]" cases=[periodic] variants=[native,xla] bandwidth.bytes=1073741824 \
    hydra.run.dir="$OUT/4096" | tee "$OUT/4096.txt"

# 3. 16-bit storage (f - w in float16 / bfloat16, float32 arithmetic): half the bytes per cell.
$PY -m lbm bench cases=[periodic] "precision=[float32,f16-storage,bf16-storage]" variants=[native,xla] \
    "sizes=[1024,2048]" hydra.run.dir="$OUT/storage" | tee "$OUT/storage.txt"

# 4. Steps per dispatch: the cost of returning to Python between steps.
for k in 1 10 100 0; do
  $PY -m lbm bench cases=[periodic] variants=[native,xla] "sizes=[256]" steps_per_dispatch=$k \
      bandwidth.enabled=false hydra.run.dir="$OUT/dispatch_$k" | tee "$OUT/dispatch_$k.txt"
done

# 5. 3D: D3Q19 box and cylinder.
$PY -m lbm bench lattice=d3q19 grid.nx=128 grid.ny=128 grid.nz=128 cylinder_grid.nz=16 variants=[auto,xla] \
    hydra.run.dir="$OUT/d3q19" | tee "$OUT/d3q19.txt"

# 6. Pure-JAX formulations against the native kernels, with XLA's fusion counts (with and without
#    XLA:CPU's multi-output fusion, which is off by default).
$PY scripts/engine_variants.py --n 1024 --steps 40 | tee "$OUT/variants_1024.txt"
$PY scripts/engine_variants.py --n 256 --steps 100 | tee "$OUT/variants_256.txt"
XLA_FLAGS=--xla_backend_extra_options=xla_cpu_use_multi_output_fusion \
  $PY scripts/engine_variants.py --n 1024 --steps 40 | tee "$OUT/variants_1024_mof.txt"

echo "results in $OUT"
