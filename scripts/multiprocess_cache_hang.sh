#!/usr/bin/env bash
# Two local processes (2 forced CPU devices each, gloo) run one 2x2 mesh RUNS times in a row, sharing one JAX
# persistent compilation cache: the first run fills it (process 0 writes), the later ones find it warm. Each run is
# "done" (both exited; their return codes) or "HUNG" (still running after WAIT s: both are killed, their Python stacks
# kept when py-spy is on PATH). Prints one line a run; the runs' logs are under OUTDIR.
#
#   bash scripts/multiprocess_cache_hang.sh                     # this tree: every run done
#   git worktree add /tmp/before e2462de && TREE=/tmp/before bash scripts/multiprocess_cache_hang.sh
#                                                               # before lbm.parallel.without_persistent_cache
# Measured 2026-12-08 (jax 0.12.1, Python 3.13; XLA's default level and the suite's level 0 alike): before, the first
# run done in 5-7 s and each later run HUNG (7 of 7;
# both processes' main threads in chunk_stats, every device thread in gloo's allreduce); with process 0 alone given
# the warm cache HUNG, with process 1 alone given it done; with no cache done (3 of 3). On jax 0.10.2 (Python 3.11)
# the warm runs were done (2 of 2). With lbm.parallel.without_persistent_cache every run done.
# PYTHON (default .venv/bin/python), RUNS (4), WAIT (60), OUTDIR (a new temporary folder).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=${TREE:-$repo}
python=${PYTHON:-$repo/.venv/bin/python}
outdir=${OUTDIR:-$(mktemp -d)}
cache=$outdir/jax-cache
mkdir -p "$cache"
export XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=2" JAX_PLATFORMS=cpu PYTHONPATH=$tree
export JAX_COMPILATION_CACHE_DIR=$cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
cd "$tree" || exit 1
for run in $(seq 1 "${RUNS:-4}"); do
  d=$outdir/run$run
  port=$("$python" -c "import socket; s = socket.socket(); s.bind(('localhost', 0)); print(s.getsockname()[1])")
  args=(case=cylinder grid.nx=64 grid.ny=32 steps=40 precision=float64 output.progress=none engine=xla
        output.plots=false parallel.devices=4 "parallel.mesh=[2,2]" "parallel.coordinator=localhost:$port"
        parallel.num_processes=2 "hydra.run.dir=$d")
  mkdir -p "$d"
  "$python" -m lbm run "${args[@]}" parallel.process_id=1 >"$d.p1.log" 2>&1 & p1=$!
  "$python" -m lbm run "${args[@]}" parallel.process_id=0 >"$d.p0.log" 2>&1 & p0=$!
  start=$SECONDS
  while { kill -0 "$p0" || kill -0 "$p1"; } 2>/dev/null && ((SECONDS - start < ${WAIT:-60})); do sleep 1; done
  if { kill -0 "$p0" || kill -0 "$p1"; } 2>/dev/null; then
    if command -v py-spy >/dev/null; then
      py-spy dump --pid "$p0" >"$d.p0.stack" 2>&1
      py-spy dump --pid "$p1" >"$d.p1.stack" 2>&1
    fi
    kill -9 "$p0" "$p1" 2>/dev/null
    wait "$p0" "$p1" 2>/dev/null
    echo "run $run: HUNG after $((SECONDS - start)) s (cache entries: $(ls "$cache" | wc -l))"
  else
    wait "$p0"; r0=$?
    wait "$p1"; r1=$?
    echo "run $run: done in $((SECONDS - start)) s, return codes $r0 $r1 (cache entries: $(ls "$cache" | wc -l))"
  fi
done
echo "logs: $outdir"
