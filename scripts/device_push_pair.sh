#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command: the wall-free 2D box between 40 and 128 MiB of populations on the push
# rows kernel (the rule until the fourteenth session, lbm.engines.pallas.aa.AA2D_MIN_BYTES = 128 MiB; it plans up to
# 2.13x the populations) against the 2D in-place pair on planes of k rows of x (twelfth session; 1.0-1.18x). The ninth
# session measured the pair ungrouped (y padded to 2048 at 2000x1200) at 4636 MLUPS against the push kernel's 7231.
#   run  command: "bash scripts/device_push_pair.sh"  carry: [".whl"]  timeout_s: 560
# 1. `lbm bench lattice=d2q9 cases=[periodic] variants=[auto,pallas,xla]` with the pair from 128 MiB
#    (scripts/pair_anywhere.py, PAIR_FROM_MIB=128: pallas is the push kernel below it); 2. the same sizes with the pair
#    at every size, variants=[pallas]. Each bench run measures its own bandwidth probe.
#    (The fourteenth session's two calls: the default sizes, then
#    SIZES="[[1024,1024],[1024,1100],[1100,1100],[1024,1200],[1152,1152],[1300,1300],[1000,1300]]";
#    docs/tpu-v5e/2026-12-07/push-pair/, run before the product took the pair from 40 MiB, so with plain `python3 -m lbm`.)
# In $OUT: push-pair.log, bench-push.json, bench-pair.json.
# Rehearsal here (1 min; on a CPU the pallas engine runs its flat kernel, not these): PATH=$HOME/.cache/lbm/venv-accel-jax0102/bin:$PATH
#   JAX_PLATFORMS=cpu SMALL=1 OUT=/tmp/pp bash scripts/device_push_pair.sh
set -u
source scripts/device_env.sh
log=$OUT/push-pair.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
if [[ -n ${SMALL:-} ]]; then sizes="[[64,48],[48,48]]"; else
  sizes=${SIZES:-"[[1024,1024],[1200,1200],[1600,1600],[2000,1200],[2400,1100],[1800,1800]]"}; fi
PAIR_FROM_MIB=128 LBM_MAIN="python3 scripts/pair_anywhere.py" bench_step 260 push lattice=d2q9 "cases=[periodic]" "variants=[auto,pallas,xla]" "sizes=$sizes"
LBM_MAIN="python3 scripts/pair_anywhere.py" bench_step 200 pair lattice=d2q9 "cases=[periodic]" "variants=[pallas]" \
  "sizes=$sizes"
ls -la "$OUT"
