#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command per PART (2026-12-07, fifteenth session): an odd chunk on the in-place
# pair runs the even kernel and the swap pass (lbm.engines.pallas.aa.aa_swap_step) instead of a push step out of the
# view and back (or, where the push kernel does not fit, the streaming on the xla side): deviceless v5e planned the 2D
# box 4096^2 1.000x the populations (2.25x before), the cavity 4098^2 1.249x (3.506x), the cylinder 3360x1440 1.206x
# (3.361x), D3Q19 128^3 1.000x (2.0x).
#   run  command: "PART=agree bash scripts/device_odd_chunks.sh"  carry: [".whl", "old-a0dbcbf"]  timeout_s: 560
#        then PART=2d and PART=3d.
#   PART=agree: scripts/backends_agree.py, the pallas engine on the chip against the same process's CPU after 1, 11
#               and 101 steps (each a chunk of odd length): the box 300x1030, the cavity 200x1100 and the cylinder
#               1202x500 on the 2D pair below its 40 MiB threshold, the D3Q19 cavity 40^3 (flat planes, kernel walls),
#               the D3Q19 cylinder 64x30x16 (flat planes, faces) and the D3Q19 box 32x16x128 (whole tiles);
#   PART=2d: `lbm bench variants=[pallas]` of the D2Q9 box and cavity 4098^2 and the cylinder 3360x1440 with one step
#            per dispatch (every chunk odd), on this checkout and on a0dbcbf (the tree before, carried in
#            old-a0dbcbf/: `git archive a0dbcbf lbm | tar -x -C old-a0dbcbf`), then two steps per dispatch (pairs);
#   PART=3d: the same bench for the D3Q19 box and cavity 256^3 and 258^3.
# In $OUT: odd-chunks-PART.log, bench-odd-*.json.
# Rehearsal here: PATH=$HOME/.cache/lbm/venv-accel-jax0102/bin:$PATH JAX_PLATFORMS=cpu SMALL=1 OUT=/tmp/odd PART=agree
#   bash scripts/device_odd_chunks.sh (then PART=2d, PART=3d)
set -u
source scripts/device_env.sh
part=${PART:-2d}
log=$OUT/odd-chunks-$part.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
old=old-a0dbcbf
bench_old() {  # bench_old LIMIT NAME OVERRIDES...: bench_step's `lbm bench` on the tree before, from its folder
  local limit=$1 name=$2; shift 2
  step "$limit" bash -c "cd $old && python3 -c 'import lbm; print(\"lbm from\", lbm.__file__)' && python3 -m lbm bench $* repeats=3 min_time_s=0.2 kernel_profile=0 \
    bandwidth.repeats=3 hydra.run.dir=$PWD/outputs/device-bench/$name"
  cp outputs/device-bench/"$name"/bench.json "$OUT/bench-$name.json" 2>/dev/null
}
agree() {  # agree OVERRIDES...: the pallas engine on the chip against the CPU, after 1, 11 and 101 steps
  step 90 python3 scripts/backends_agree.py --engine pallas --stage-steps "" --steps "${AGREE_STEPS:-1,11,101}" \
    --pair-2d-at-every-size -- "$@"
}
if [[ $part == agree && -n ${SMALL:-} ]]; then
  agree case=taylor_green lattice=d2q9 grid.nx=16 grid.ny=300
  agree case=cylinder lattice=d3q19 grid.nx=24 grid.ny=10 grid.nz=12
elif [[ $part == agree ]]; then
  agree case=taylor_green lattice=d2q9 grid.nx=300 grid.ny=1030
  agree case=cavity lattice=d2q9 grid.nx=200 grid.ny=1100
  agree case=cylinder lattice=d2q9 grid.nx=1202 grid.ny=500
  agree case=cavity lattice=d3q19 grid.nx=40 grid.ny=40 grid.nz=40
  agree case=cylinder lattice=d3q19 grid.nx=64 grid.ny=30 grid.nz=16
  agree case=taylor_green lattice=d3q19 grid.nx=32 grid.ny=16 grid.nz=128
fi
[[ $part == agree ]] && { ls -la "$OUT"; exit 0; }
if [[ $part == 2d ]]; then
  if [[ -n ${SMALL:-} ]]; then box="[[48,40]]" cyl="cylinder_grid.nx=64 cylinder_grid.ny=24"
  else box="[[4098,4098]]" cyl="cylinder_grid.nx=3360 cylinder_grid.ny=1440"; fi
  set -- lattice=d2q9 "cases=[periodic,cavity,cylinder]" "variants=[pallas]" "sizes=$box" $cyl
else
  if [[ -n ${SMALL:-} ]]; then box="[[8,8,8]]"; else box="[[256,256,256],[258,258,258]]"; fi
  set -- lattice=d3q19 "cases=[periodic,cavity]" "variants=[pallas]" "sizes=$box"
fi
bench_step 150 "odd-$part-new-1" "$@" steps_per_dispatch=1
bench_old 150 "odd-$part-old-1" "$@" steps_per_dispatch=1
bench_step 150 "odd-$part-new-2" "$@" steps_per_dispatch=2
ls -la "$OUT"
