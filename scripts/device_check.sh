#!/usr/bin/env bash
# Device check (issues 10 and 37): on a machine with a TPU or an NVIDIA GPU, in under 8 minutes (its budget, LBM_CHECK_BUDGET_S, is 470 s),
#   1. finds (or installs) a jax that sees the accelerator, and lbm's other dependencies,
#   2. runs the tests marked `device` (compiled pallas vs xla on the device; the 3D grids that once aborted XLA's TPU
#      compiler, 32^3 to 128^3, compiled on the chip's own libtpu and stepped: tests/engines/pallas/test_device_sizes.py;
#      the default cylinder's fields after 1000 steps against the same process's CPU: tests/engines/test_device_fields.py),
#   3. runs `lbm bench` for the pallas and xla engines, D2Q9 (1024^2 and the cylinder 420x180) and D3Q19 (128^3; on a
#      TPU the periodic box only: the 3D cylinder's two compiles took 80 s of the check there),
#      the device's bandwidth probe measured in the same run,
#   4. runs the default case (cylinder) profiled, fused and instrumented (short runs: a trace well under 2 MB),
#      and XProf's offline converter (hlo_stats) on both traces where xprof is importable,
#   5. runs `lbm validate --quick` (a check the device cannot run, float64 on a TPU, is skipped with its reason),
# and leaves everything under outputs/device-check/ (summary.txt, logs, bench-*/bench.json, profile-*/profile/,
# validate/). Every step runs whatever happened before it: a failure is recorded (summary.txt, its log's tail) and
# the next step goes on; the script exits 1 at the end if any step failed.
#
# ON THE WORKPLACE'S LENT TPU MACHINE (tpu-v5e; /work/.library/device/KINDS.md): one TPU v5e chip, Python 3.11.7
# with jax 0.10.2 + libtpu preinstalled and named by PYTHONPATH (which this script appends to, never replaces),
# no network, 30 minutes of device time per session including the machine's start (1-2 min). Here, with network,
# first: `bash scripts/device_wheels.sh` (the py3.11 wheels that machine lacks, about 36 MB: hydra-core, omegaconf,
# antlr4, perfetto, pyevtk, rich, submitit, trimesh, rtree and their small dependencies, and xprof for the XProf
# cross-check; into the ignored .whl/; matplotlib comes from the machine's own index), then ONE call of `run`:
#   run  command: "LBM_DEVICE_INSTALL=preinstalled bash scripts/device_check.sh"  carry: [".whl"]  timeout_s: 600
# It prints the results' summary and copies them into $OUT (at most 8 files, each <= 16 MiB: summary.txt,
# the two bench.json, the two breakdown.csv, pytest-device.xml, validate.json, device-check.tgz with the rest).
# pytest runs with -n 0 (one process: one program at a time may hold the chip) and needs no pytest-xdist.
#
# Which python (LBM_DEVICE_INSTALL):
#   preinstalled  $LBM_PYTHON (default python3) as it is: its jax must see the accelerator. Wheels in .whl/, if
#                 any, are installed offline first (pip --no-index --no-deps --target <tmp>/site, on PYTHONPATH);
#                 no network is used. The lent machine's path.
#   venv          (needs network) a venv $LBM_DEVICE_VENV (default <repo>/.venv-device) with jax[cuda12] (or
#                 jax[tpu]) == LBM_JAX_VERSION (default: .venv's jax, else 0.12.0.1) and lbm[test] from a registry.
#   auto          (default) preinstalled when $LBM_PYTHON/python3's jax already sees the accelerator, else venv.
#                 The lent machine's line names preinstalled: a venv there would wait on pip's network timeouts.
# Other environment: LBM_DEVICE (cuda | tpu | cpu; default: detected), LBM_CHECK_BUDGET_S (default 470: steps
# are cut to what is left of it, so the whole check ends before the run tool's limit), LBM_DEVICE_CHECK_OUT (the
# results folder, default outputs/device-check; emptied first).
# REHEARSAL on a CPU machine: LBM_DEVICE=cpu runs every step the same way on the CPU backend with tiny grids, the
# pallas kernel in interpret mode (what a GPU runs compiled), the device tests included (LBM_DEVICE_REHEARSAL=1
# lets them run on the CPU); only the check that engine=auto picks pallas is left out (on a CPU it picks native
# or xla). To rehearse "no network": PIP_NO_INDEX=1 LBM_DEVICE_INSTALL=preinstalled LBM_PYTHON=<a python with
# jax 0.11.2 and the device's packages> OUT=<a folder>.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
run_tool_line='run  command: "LBM_DEVICE_INSTALL=preinstalled bash scripts/device_check.sh"  carry: [".whl"]  timeout_s: 600'
echo "device_check: on the workplace's lent TPU machine, after 'bash scripts/device_wheels.sh' here, call:"
echo "device_check:   $run_tool_line"
out=${LBM_DEVICE_CHECK_OUT:-outputs/device-check}  # every result of the check, and nothing else, goes here
rm -rf "$out"
mkdir -p "$out"
start=$(date +%s)
budget=${LBM_CHECK_BUDGET_S:-470}
summary="$out/summary.txt"
: > "$summary"
failed=()

say() { echo "device_check: $*" | tee -a "$summary"; }
fail() {  # fail NAME WHY: record a failed step and go on
  failed+=("$1")
  say "FAILED: $1: $2"
}
step() {  # step NAME LIMIT_S LOG COMMAND...: run with a time limit (cut to the budget left); record and go on
  local name=$1 limit=$2 log=$3; shift 3
  local t0 left rc=0
  t0=$(date +%s)
  left=$(( start + budget - t0 - 20 ))  # 20 s kept for packing the results
  (( left < limit )) && limit=$left
  if (( limit < 10 )); then
    fail "$name" "not run: the ${budget} s budget is spent"
    return 1
  fi
  say "$name (limit ${limit} s) ..."
  timeout -k 10 "$limit" "$@" >"$log" 2>&1 || rc=$?
  if (( rc != 0 )); then
    tail -n 30 "$log" | sed 's/^/    /' | tee -a "$summary" >&2
    if (( rc == 124 || rc == 137 )); then
      fail "$name" "timed out after $limit s (log: $log)"
    else
      fail "$name" "exit $rc after $(( $(date +%s) - t0 )) s (log: $log)"
    fi
    return 1
  fi
  say "$name: ok in $(( $(date +%s) - t0 )) s (log: $log)"
}
check() {  # check NAME CONDITION-COMMAND...: a postcondition of a step; record a failure and go on
  local name=$1; shift
  "$@" || fail "$name" "check failed: $*"
}

# --- which accelerator ----------------------------------------------------------------------------------------
device=${LBM_DEVICE:-}
if [[ -z "$device" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    device=cuda
  elif ls /dev/accel* >/dev/null 2>&1 || ls /dev/vfio/* >/dev/null 2>&1; then
    device=tpu
  else
    echo "device_check: no NVIDIA GPU (nvidia-smi -L) and no TPU (/dev/accel*, /dev/vfio) here;" \
      "set LBM_DEVICE=cuda|tpu to force, or LBM_DEVICE=cpu to rehearse on the CPU" >&2
    exit 2
  fi
fi
case "$device" in
  cuda) backend=gpu; jax_extra=cuda12 ;;
  tpu) backend=tpu; jax_extra=tpu ;;
  cpu) backend=cpu; jax_extra="" ;;
  *) echo "device_check: LBM_DEVICE must be cuda, tpu or cpu, not '$device'" >&2; exit 2 ;;
esac
rehearsal=""
[[ $device == cpu ]] && rehearsal=1
[[ $device == cuda ]] && { nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true; }
if [[ $device == cuda ]]; then  # the venv install's wheels: CUDA 13 from driver 580 on (jax[cuda13]), else CUDA 12
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
  [[ ${driver%%.*} =~ ^[0-9]+$ ]] && (( ${driver%%.*} >= 580 )) && jax_extra=cuda13
fi
say "device: $device${rehearsal:+ (rehearsal on the CPU: tiny grids, pallas in interpret mode)}; budget ${budget} s"

# --- environment ------------------------------------------------------------------------------------------------
sees() {  # sees PYTHON: its jax imports and its default backend is the one wanted
  [[ "$("$1" -c 'import jax; print(jax.default_backend())' 2>/dev/null | tail -n 1)" == "$backend" ]]
}
install=${LBM_DEVICE_INSTALL:-auto}
python=${LBM_PYTHON:-python3}
if [[ $install == auto ]]; then
  if command -v "$python" >/dev/null 2>&1 && sees "$python"; then install=preinstalled; else install=venv; fi
fi
pythonpath=$root
case "$install" in
  preinstalled)
    python=$(command -v "$python") || { echo "device_check: no $python (set LBM_PYTHON)" >&2; exit 2; }
    whl=("$root"/.whl/*.whl)
    if [[ -e "${whl[0]}" ]]; then
      site=$(mktemp -d "${TMPDIR:-/tmp}/lbm-device-site.XXXXXX")
      trap 'rm -rf "$site"' EXIT
      # the device README's offline recipe: no index, no dependency resolution, into a folder on PYTHONPATH
      step "install ${#whl[@]} carried wheels from .whl/ offline" 120 "$out/install.log" \
        "$python" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$site" "${whl[@]}"
      pythonpath=$root:$site
    fi
    # matplotlib: from the machine's own package index where it lacks one (the TPU machine has /opt/pypi/simple)
    if ! PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$pythonpath" "$python" -c 'import matplotlib' >/dev/null 2>&1 \
        && [[ -d /opt/pypi/simple ]]; then
      site=${site:-$(mktemp -d "${TMPDIR:-/tmp}/lbm-device-site.XXXXXX")}
      mpl=$site-mpl
      step "install matplotlib from the machine's index (/opt/pypi/simple)" 120 "$out/install-matplotlib.log" \
        env PIP_CONFIG_FILE=/dev/null "$python" -m pip install --isolated -q --only-binary=:all: \
        --index-url file:///opt/pypi/simple --target "$mpl" matplotlib
      pythonpath=$pythonpath:$mpl
    fi
    ;;
  venv)
    [[ -n "$jax_extra" ]] || { echo "device_check: LBM_DEVICE=cpu has no venv install (use preinstalled)" >&2; exit 2; }
    venv=${LBM_DEVICE_VENV:-$root/.venv-device}
    jax_version=${LBM_JAX_VERSION:-}
    if [[ -z "$jax_version" && -x "$root/.venv/bin/python" ]]; then
      jax_version=$("$root/.venv/bin/python" -c 'import jax; print(jax.__version__)' 2>/dev/null || true)
    fi
    jax_version=${jax_version:-0.12.0.1}
    py=$(LBM_PYTHON="${LBM_PYTHON:-}" bash "$root/install.sh" --find-python) \
      || { echo "device_check: no python >= 3.11 (set LBM_PYTHON)" >&2; exit 2; }
    [[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv" || { echo "device_check: no venv at $venv" >&2; exit 2; }
    step "install jax[$jax_extra]==$jax_version and lbm[test] (network)" 300 "$out/install.log" \
      "$venv/bin/python" -m pip install --disable-pip-version-check --quiet "jax[$jax_extra]==$jax_version" -e "$root[test]"
    python=$venv/bin/python
    ;;
  *) echo "device_check: LBM_DEVICE_INSTALL must be auto, preinstalled or venv, not '$install'" >&2; exit 2 ;;
esac
# appended to the caller's PYTHONPATH, never replacing it: on the TPU machine it names the folder of its jax; the
# carried wheels come after it, so that the machine's own packages stay first
root_first=${pythonpath%%:*}
rest=${pythonpath#"$root_first"}
export PYTHONPATH=$root_first${PYTHONPATH:+:$PYTHONPATH}$rest PYTHONUNBUFFERED=1
[[ -n "$rehearsal" ]] && export LBM_DEVICE_REHEARSAL=1 JAX_PLATFORMS=cpu
say "python: $python ($install); PYTHONPATH=$PYTHONPATH"

step "jax sees the $device; lbm and its dependencies import" 120 "$out/devices.log" "$python" - "$backend" <<'PY'
import importlib.metadata as md
import sys

import jax

print("jax's default backend:", jax.default_backend())  # read by on_device below (each new jax process opens the chip)
print("python", sys.version.split()[0], "jax", jax.__version__, "jaxlib", md.version("jaxlib"), jax.devices())
for name in ("jax-cuda13-plugin", "jax-cuda12-plugin", "numpy", "hydra-core", "omegaconf", "perfetto", "pyevtk"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name} not installed")
if jax.default_backend() != sys.argv[1]:
    sys.exit(f"jax's default backend is {jax.default_backend()}, not {sys.argv[1]}: the accelerator's plugin did not load")
import hydra, omegaconf, pyevtk  # noqa: E401, F401  lbm's runtime dependencies that the lent machine lacks
from lbm.config import load
from lbm.engines import auto_choice, make_engine
from lbm.simulation import make_case

setup = make_case(load([])).setup()
engine = make_engine(setup)
print("engine=auto on this device:", engine.name, engine.note)
wanted, why = auto_choice(setup, jax.default_backend())
if sys.argv[1] != "cpu" and engine.name != wanted:  # on a CPU auto picks native, or xla without a compiler
    sys.exit(f"engine=auto picked {engine.name}, not {wanted} ({why}): {engine.note}")
PY

# Everything below needs jax on the accelerator: without it (a plugin that did not load) the steps would run
# on the CPU for the whole budget, so they are skipped and the failure says why. Read from the step above's log, not
# asked again: a new jax process opens the chip, about 20 s on the TPU v5e machine (twice 20 s of the budget before).
on_device() { grep -qx "jax's default backend: $backend" "$out/devices.log"; }
if on_device; then
  # --- tests marked device (-n 0: one process; xdist workers would each take the GPU's memory) ---------------
  # XLA's default optimisation level (3) named in XLA_FLAGS: tests/helpers/suite.py then keeps it instead of adding
  # level 0, which is there for the CPU suite's compile time, not for the device's kernels. -v: the name of each test
  # before it runs (a compiler abort ends pytest; the log's tail then names the configuration). Not the profiled-run
  # test: the two profiled runs below check its breakdown on the chip, with their verdicts (15 s of the budget).
  XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_backend_optimization_level=3" XLA_PYTHON_CLIENT_PREALLOCATE=false \
    step "pytest -m device" 240 "$out/pytest-device.log" \
    "$python" -m pytest -v -n 0 -p no:cacheprovider -m device -k "not a_profiled_run" \
    tests/engines/pallas/test_engines_pallas.py tests/engines/pallas/test_device_sizes.py --junitxml="$out/pytest-device.xml"
  check "pytest -m device ran its tests" grep -q " passed" "$out/pytest-device.log"
  check "pytest -m device skipped none" bash -c "! grep -q ' skipped' '$out/pytest-device.log'"

  # --- bench: pallas and xla, D2Q9 and D3Q19, bandwidth in the same run --------------------------------------------
  lbm=("$python" -m lbm)
  if [[ -n "$rehearsal" ]]; then  # interpret mode: 19-25 MLUPS at 32^2 on a 2-core CPU (one compile per config)
    d2=(grid.nx=32 grid.ny=32 cylinder_grid.nx=40 cylinder_grid.ny=24)
    d3=(grid.nx=8 grid.ny=8 grid.nz=8 cylinder_grid.nx=40 cylinder_grid.ny=24 cylinder_grid.nz=4)
    timing=(repeats=2 min_time_s=0.05 kernel_profile=2 bandwidth.bytes=8388608 bandwidth.repeats=2)
    run_size=(grid.nx=40 grid.ny=24 engine=pallas)
    fused_steps=20 instrumented_steps=10 window=(profile.warmup_steps=2 profile.steps=4)
  else  # 1024^2 x 9 x 4 B = 38 MB and 128^3 x 19 x 4 B = 159 MB of populations: well over the 60 MB L2 at 128^3
    d2=(grid.nx=1024 grid.ny=1024)
    d3=(grid.nx=128 grid.ny=128 grid.nz=128 cylinder_grid.nz=32)
    # kernel_profile=0: bench's per-kernel trace of each configuration took 2-9 s apiece on the chip (about 20 s of the
    # check); the profiled runs below give the per-kernel device times, with XProf's cross-check
    timing=(repeats=3 min_time_s=0.2 kernel_profile=0 bandwidth.repeats=5)
    run_size=(engine=pallas)
    # scripts/device_fixture.py's capture (its CAPTURE): fused 100 steps in chunks of 10 (a 1-chunk warm-up, 2 steady
    # chunks), instrumented 20 steps (a 2-step warm-up, 6 steady steps): each trace well under 2 MB, so that
    # `python scripts/device_fixture.py <files_at>` makes the test fixtures from this check's results
    fused_steps=100 instrumented_steps=20 window=(profile.warmup_steps=1)
  fi
  declare -A bench_cases=([d2q9]=periodic,cylinder [d3q19]=periodic,cylinder)
  [[ $device == tpu ]] && bench_cases[d3q19]=periodic
  for lat in d2q9 d3q19; do
    if [[ $lat == d2q9 ]]; then size=("${d2[@]}"); else size=("${d3[@]}"); fi
    step "bench $lat ${size[*]} (pallas, xla)" 150 "$out/bench-$lat.log" "${lbm[@]}" bench lattice=$lat \
      "variants=[pallas,xla]" "cases=[${bench_cases[$lat]}]" "${size[@]}" "${timing[@]}" "hydra.run.dir=$out/bench-$lat"
    check "bench $lat wrote bench.json with pallas records" grep -q '"engine": "pallas"' "$out/bench-$lat/bench.json"
  done

  # --- the default case, profiled, both modes ----------------------------------------------------------------------
  for mode in fused instrumented; do
    steps=$fused_steps; [[ $mode == instrumented ]] && steps=$instrumented_steps
    wsteps=(); [[ -z "$rehearsal" ]] && { wsteps=(profile.steps=20); [[ $mode == instrumented ]] && wsteps=(profile.steps=6); }
    step "profiled run, mode=$mode, $steps steps" 120 "$out/profile-$mode.log" "${lbm[@]}" run mode=$mode \
      steps=$steps output.every=0 profile.enabled=true "${window[@]}" "${wsteps[@]}" "${run_size[@]}" \
      "hydra.run.dir=$out/profile-$mode"
    check "profile-$mode wrote its breakdown" test -s "$out/profile-$mode/profile/breakdown.csv"
  done
  # --- XProf's offline converter on the fused trace (issue 20, item 6): its per-kernel device times, saved beside
  # the profile for device_verdict.py (which compares them with lbm's kernels.csv) and for the fixture
  if "$python" -c 'import xprof.convert.raw_to_tool_data' >/dev/null 2>&1; then
    for mode in fused instrumented; do
    step "xprof hlo_stats of the $mode trace" 60 "$out/xprof-$mode.log" "$python" - "$out/profile-$mode/profile" <<'PY'
import sys
from pathlib import Path

from xprof.convert.raw_to_tool_data import xspace_to_tool_data

profile = Path(sys.argv[1])
(xplane,) = sorted(profile.glob("plugins/profile/*/*.xplane.pb"))
data, _ = xspace_to_tool_data([str(xplane)], "hlo_stats", {})
(profile / "xprof_hlo_stats.json").write_text(data.decode() if isinstance(data, bytes) else (data or "{}"))
print("hlo_stats of", xplane, "->", profile / "xprof_hlo_stats.json")
PY
    done
  else
    say "xprof is not importable here: the XProf cross-check is left out (pip install xprof; no network on the lent machine)"
  fi
else
  fail "jax on the $device" "$("$python" -c 'import jax; print(jax.devices())' 2>&1 | tail -n 5 | tr '\n' ' ')"
  say "skipped the device tests, bench and profiled runs: jax does not see the $device"
fi

# --- validate --quick on the device (issue 37, item 4): a check it cannot run (float64 on a TPU) is skipped -----
if on_device; then
  step "validate --quick" 150 "$out/validate.log" "$python" -m lbm validate --quick --out "$out/validate"
  check "validate wrote its report" test -s "$out/validate/validation.json"
fi


# --- results ------------------------------------------------------------------------------------------------------
# the figures, also in the run tool's output tail (its last 12,000 characters), should the files not come back
"$python" - "$out" <<'PY' 2>&1 | tee -a "$summary"
import csv
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
for lat in ("d2q9", "d3q19"):
    try:
        d = json.loads((out / f"bench-{lat}" / "bench.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"bench {lat}: no bench.json ({exc})")
        continue
    env, bw = d.get("environment", {}), d.get("bandwidth") or {}
    print(f"bench {lat}: {env.get('gpu_model') or env.get('device_kind')}, jax {env.get('jax')}, "
          f"copy bandwidth {bw.get('bandwidth_gbs', float('nan')):.0f} GB/s")
    for r in d.get("records", []):
        print(f"  {r['case']:9} {'x'.join(map(str, r['grid'])):12} {r['engine']:7} "
              f"{r['mlups']['median']:10.1f} MLUPS (spread {r['mlups'].get('spread_pct', 0):.0f} %)  "
              f"{100 * (r.get('fraction_of_roofline') or 0):5.1f} % of the copy roofline  "
              f"{r.get('bytes_per_cell_update')} B/cell")
for mode in ("fused", "instrumented"):
    path = out / f"profile-{mode}" / "profile" / "breakdown.csv"
    if not path.exists():
        print(f"profile {mode}: no breakdown.csv")
        continue
    print(f"profile {mode}: stage, status, clock, mean ms per step, share of the stages' mean")
    for r in csv.DictReader(path.open()):
        if r["status"] not in ("skipped", "fused"):
            print(f"  {r['stage']} | {r['status']} | {r['clock']} | {r['mean_ms'] or '-'} | {r['share'] or '-'}")
PY
# issue 10's real-GPU criteria (>= 75 % of the same-run bandwidth; the breakdown sums to the step within 10 %) and
# issue 20's XProf cross-check (per-kernel device times within 15 % of XProf's hlo_stats):
# results, not steps, so a FAIL here does not fail the check (on a rehearsal's tiny CPU grids they cannot pass)
say "issue 10's criteria (scripts/device_verdict.py):"
"$python" scripts/device_verdict.py "$out" 2>&1 | sed 's/^/  /' | tee -a "$summary"
du -sh "$out"/profile-*/profile 2>/dev/null | sed 's/^/device_check: trace folder /' | tee -a "$summary"
if (( ${#failed[@]} )); then
  say "done in $(( $(date +%s) - start )) s: ${#failed[@]} FAILED: $(printf "%s; " "${failed[@]}")"
else
  say "done in $(( $(date +%s) - start )) s: every step passed; results under $out"
fi
if [[ -n "${OUT:-}" ]]; then  # the run tool brings back <= 8 plain files, <= 16 MiB each, from $OUT
  mkdir -p "$OUT"
  for lat in d2q9 d3q19; do cp "$out/bench-$lat/bench.json" "$OUT/bench-$lat.json" 2>/dev/null; done
  for mode in fused instrumented; do
    cp "$out/profile-$mode/profile/breakdown.csv" "$OUT/breakdown-$mode.csv" 2>/dev/null
  done
  cp "$out/pytest-device.xml" "$OUT/" 2>/dev/null
  cp "$out/validate/validation.json" "$OUT/validate.json" 2>/dev/null
  tar czf "$OUT/device-check.tgz" "$out"
  if (( $(stat -c %s "$OUT/device-check.tgz") > 15 * 2**20 )); then  # keep the logs; leave out the largest traces
    tar czf "$OUT/device-check.tgz" --exclude='*.xplane.pb' --exclude='*trace.json.gz' "$out"
    say "device-check.tgz over 15 MiB: packed without the raw traces"
  fi
  cp "$summary" "$OUT/summary.txt"
  echo "device_check: in \$OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
fi
(( ${#failed[@]} == 0 ))
