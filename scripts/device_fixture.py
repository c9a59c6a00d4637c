"""Real device traces as test fixtures: tests/fixtures/device/<device>-<mode>/, one per profiled mode, 2 MB at most.

  python scripts/device_fixture.py capture [fused] [instrumented] [-- OVERRIDES]  # ON THE DEVICE: into $OUT
  python scripts/device_fixture.py FOLDER [NAME]                   # here: the fixtures from what came back

THE CAPTURE (issue 37 item 3; the default cylinder 420x180 D2Q9, the pallas engine): one call of the `run` tool per
mode, after `bash scripts/device_wheels.sh` here (the wheels the lent machine lacks, into .whl/), exactly:

  run  command: "python3 scripts/device_fixture.py capture fused"  carry: [".whl"]  timeout_s: 300
  run  command: "python3 scripts/device_fixture.py capture instrumented"  carry: [".whl"]  timeout_s: 300

(one call may hold both: `capture fused instrumented`). ``capture`` installs the carried wheels offline into a
temporary folder (as device_check.sh does: pip --no-index --no-deps --target; matplotlib from the machine's own
index where it lacks one), appended to the machine's PYTHONPATH; then for each mode runs

  python3 -m lbm run <CAPTURE[mode]> engine=pallas output.every=0 output.plots=false profile.enabled=true
      hydra.run.dir=outputs/device-fixture/profile-<mode>

(fused: mode=fused steps=100 profile.warmup_steps=1 profile.steps=20, chunks of 10 steps: a 1-chunk warm-up and
2 steady chunks; instrumented: mode=instrumented steps=20 profile.warmup_steps=1 profile.steps=6, chunks of 2
steps: a 2-step warm-up and 6 steady steps; device_check.sh's traces of 2000 and 200 steps were 2.4-2.6 MB per
form: the XPlane is not compressed, and its /host:metadata plane holds the programs' HLO, about 0.5 MB), XProf's
hlo_stats of its trace where xprof imports (the wheels hold it), packs the run's directory (without the fields,
the plots, the Perfetto copy of the trace and XProf's cache) into $OUT/device-fixture-<mode>.tgz, and prints the
breakdown and scripts/device_verdict.py's lines for it.
Overrides after ``--`` follow the capture's: a rehearsal on a CPU, `capture fused -- grid.nx=40 grid.ny=24`.
The run tool sends the session's checkout: the fixture's breakdown.csv and kernels.csv are what that checkout's
code computed on the device, and the tests compare the code they run with them (capture with the same code).

Back here, ``python scripts/device_fixture.py <files_at>`` (the returned device-fixture-*.tgz; or a folder holding
profile-<mode>/ run directories, as device_check.sh's outputs/device-check) writes one fixture per mode: the
trace in both of jax.profiler's forms (``*.trace.json.gz``, ``*.xplane.pb``) and the compile report, laid out as a
run directory's ``profile/``; the breakdown and kernels the device computed (``profile/breakdown.csv``,
``profile/kernels.csv``); XProf's hlo_stats (``profile/xprof_hlo_stats.json``, its columns cut to the ones the
cross-check and a reader need: not the HLO text and source HTML); the run's ``metrics.json``; ``made.txt`` (how
the fixture was made). tests/profiling/test_profiling_device_fixtures.py checks every fixture folder. An existing fixture
of the same name is never overwritten, and one over 2 MB is refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from device_verdict import XPROF_FILE, unpacked, verdicts  # scripts/ is on sys.path when this script runs

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "device"
LIMIT = 2 * 2**20
"""Issue 10 and issue 37: a small real trace, at most 2 MB per fixture."""
MODES = ("fused", "instrumented")
COMMON = ("engine=pallas", "output.every=0", "output.plots=false", "profile.enabled=true")
CAPTURE = {"fused": ("mode=fused", "steps=100", "profile.warmup_steps=1", "profile.steps=20"),
           "instrumented": ("mode=instrumented", "steps=20", "profile.warmup_steps=1", "profile.steps=6")}
"""The capture's overrides per mode: the chunk is a tenth of the steps (output.every=0), the window whole chunks."""
CAPTURED = Path("outputs") / "device-fixture"
XPROF_COLUMNS = ("rank", "program_id", "category", "hlo_op_name", "tf_op_name", "occurrences", "total_time",
                 "avg_time", "total_self_time", "avg_self_time", "bound_by")
"""XProf hlo_stats columns a fixture keeps (values as XProf gave them)."""
LEFT_OUT = ("fields.npz", "plots", "perfetto_trace.json.gz", "op_stats")
"""What the packed run leaves out: the fields and plots, the Perfetto copy of the trace, XProf's cached op stats."""


def environment(tmp: Path) -> dict[str, str]:
    """lbm's environment on the lent machine: the carried wheels (.whl/) installed offline into ``tmp``, and
    matplotlib from the machine's own index (/opt/pypi/simple) where it has none, after the machine's PYTHONPATH
    (which names its jax); the wheels' folder also on this process's path (for xprof)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    paths = [str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", "--no-cache-dir"]
    wheels = sorted(str(w) for w in (ROOT / ".whl").glob("*.whl"))
    if wheels:
        subprocess.run([*pip, "--no-index", "--no-deps", "--target", str(tmp / "site"), *wheels], check=True)
        paths.append(str(tmp / "site"))
        sys.path.append(str(tmp / "site"))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    has_mpl = subprocess.run([sys.executable, "-c", "import matplotlib"], env=env, capture_output=True).returncode == 0
    if not has_mpl and Path("/opt/pypi/simple").is_dir():
        subprocess.run([*pip, "--isolated", "--only-binary=:all:", "--index-url", "file:///opt/pypi/simple", "--target",
                        str(tmp / "mpl"), "matplotlib"], check=True, env=dict(env, PIP_CONFIG_FILE=os.devnull))
        env["PYTHONPATH"] += os.pathsep + str(tmp / "mpl")
    return env


def capture(modes: list[str], out: Path, extra: list[str] | None = None) -> int:
    """On the device: the profiled run of each mode, XProf's hlo_stats of its trace, packed into ``out``; ``extra``:
    overrides after the capture's (a rehearsal on a CPU: a small grid)."""
    with tempfile.TemporaryDirectory() as tmp:
        return _capture(modes, out, environment(Path(tmp)), extra or [])


def _capture(modes: list[str], out: Path, env: dict[str, str], extra: list[str]) -> int:
    failed = 0
    for mode in modes:
        run_dir = CAPTURED / f"profile-{mode}"
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = [sys.executable, "-m", "lbm", "run", *CAPTURE[mode], *COMMON, *extra, f"hydra.run.dir={run_dir}"]
        print("device_fixture:", " ".join(cmd), flush=True)
        if subprocess.run(cmd, check=False, env=env).returncode != 0:
            print(f"device_fixture: the {mode} run failed", file=sys.stderr)
            failed += 1
            continue
        profile = run_dir / "profile"
        (xplane,) = sorted(profile.glob("plugins/profile/*/*.xplane.pb"))
        stats = xprof_hlo_stats_json(xplane)
        if stats is not None:
            (profile / XPROF_FILE).write_text(stats)
        else:
            print("device_fixture: xprof is not importable here: no XProf cross-check in the fixture")
        out.mkdir(parents=True, exist_ok=True)
        packed = out / f"device-fixture-{mode}.tgz"
        with tarfile.open(packed, "w:gz") as tar:
            tar.add(run_dir, arcname=str(run_dir), filter=lambda t: None if any(
                part in LEFT_OUT or part.startswith("ALL_HOSTS") for part in Path(t.name).parts) else t)
        print(f"device_fixture: {packed} ({packed.stat().st_size / 1024:.0f} KiB)")
        print((profile / "breakdown.txt").read_text())
        for ok, line in verdicts(CAPTURED):
            if mode in line:
                print(f"{'PASS' if ok else 'FAIL' if ok is False else 'INFO'}  {line}")
    return 1 if failed else 0


def xprof_hlo_stats_json(xplane: Path) -> str | None:
    """XProf's hlo_stats of an xplane as its JSON text; None without xprof."""
    try:
        from xprof.convert.raw_to_tool_data import xspace_to_tool_data
    except ImportError:
        return None
    data, _ = xspace_to_tool_data([str(xplane)], "hlo_stats", {})
    return data.decode() if isinstance(data, bytes) else data


def trimmed_xprof(text: str) -> str:
    """XProf's hlo_stats DataTable with only XPROF_COLUMNS (rows and values unchanged)."""
    doc = json.loads(text)
    keep = [i for i, c in enumerate(doc.get("cols", [])) if c.get("id") in XPROF_COLUMNS]
    doc["cols"] = [doc["cols"][i] for i in keep]
    doc["rows"] = [{"c": [r["c"][i] for i in keep]} for r in doc.get("rows", [])]
    return json.dumps(doc, separators=(",", ":")) + "\n"


def fixture_name(run_dir: Path) -> str:
    """A folder name from the run's device (metrics.json: ``tpu:TPU v5 lite`` → tpu-v5-lite) and mode."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    device = str(metrics.get("device") or "device").split(":", 1)[-1]
    return re.sub(r"[^a-z0-9]+", "-", f"{device} {metrics.get('mode')}".lower()).strip("-")


def run_dirs(folder: Path, tmp: str) -> list[Path]:
    """The profiled run directories in ``folder``: profile-<mode>/ in it, or in its device-fixture-*.tgz or
    device-check.tgz unpacked into ``tmp``."""
    packs = sorted(folder.glob("device-fixture-*.tgz"))
    if packs:
        for p in packs:
            with tarfile.open(p) as tar:
                tar.extractall(tmp, filter="data")
        folder = Path(tmp) / CAPTURED
    else:
        folder = unpacked(folder, tmp) or folder
    return [folder / f"profile-{m}" for m in MODES if (folder / f"profile-{m}" / "profile").is_dir()]


def collect(run_dir: Path, dest: Path, source: str) -> list[Path]:
    """Copy one run's fixture files from ``run_dir`` (found in ``source``) into ``dest``; the paths written."""
    profile = run_dir / "profile"
    found = {kind: sorted(profile.glob(f"plugins/profile/*/*.{kind}")) for kind in ("trace.json.gz", "xplane.pb")}
    if any(len(v) != 1 for v in found.values()):
        raise SystemExit(f"device_fixture: expected one *.trace.json.gz and one *.xplane.pb under "
                         f"{profile}/plugins/profile, found {', '.join(str(len(v)) for v in found.values())}")
    session = dest / "profile" / "plugins" / "profile" / "run"
    files = {src[0]: session / src[0].name for src in found.values()}
    files |= {profile / "compile" / "compile.json": dest / "profile" / "compile" / "compile.json",
              profile / "breakdown.csv": dest / "profile" / "breakdown.csv",
              profile / "kernels.csv": dest / "profile" / "kernels.csv",
              run_dir / "metrics.json": dest / "metrics.json"}
    missing = [str(src) for src in files if not src.exists()]
    if missing:
        raise SystemExit(f"device_fixture: missing {', '.join(missing)}")
    xprof = profile / XPROF_FILE
    stats = trimmed_xprof(xprof.read_text()) if xprof.exists() else None
    if stats is None:
        converted = xprof_hlo_stats_json(found["xplane.pb"][0])
        stats = trimmed_xprof(converted) if converted else None
    size = sum(src.stat().st_size for src in files) + len(stats or "")
    if size > LIMIT:
        raise SystemExit(f"device_fixture: {size} bytes, over the {LIMIT}-byte limit: capture a shorter run "
                         f"(python scripts/device_fixture.py capture {run_dir.name.removeprefix('profile-')}: see "
                         "its docstring)")
    for src, target in files.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
    written = list(files.values())
    if stats is not None:
        (dest / "profile" / XPROF_FILE).write_text(stats)
        written.append(dest / "profile" / XPROF_FILE)
    made = dest / "made.txt"  # how the fixture was made, for whoever reads tests/fixtures
    made.write_text(
        f"Made by scripts/device_fixture.py from {source} ({run_dir.name}: a profiled run on the device; its "
        "metrics.json names the device, jax and the run). The trace in both forms, the compile report, and the "
        "breakdown and kernels the device computed are as the run wrote them; "
        + (f"{XPROF_FILE} is XProf's hlo_stats of the same xplane, its columns cut to {', '.join(XPROF_COLUMNS)}.\n"
           if stats is not None else "XProf did not run (no xprof where the fixture was made).\n"))
    return [*written, made]


def main(argv: list[str]) -> int:
    """``capture [MODE...]`` on the device; else FOLDER [NAME]: write tests/fixtures/device/<name>/; 2 on bad input."""
    if argv and argv[0] == "capture":
        extra = argv[argv.index("--") + 1:] if "--" in argv else []
        modes = (argv[1:argv.index("--")] if "--" in argv else argv[1:]) or list(MODES)
        if any(m not in MODES for m in modes):
            print(f"device_fixture: capture takes modes from {', '.join(MODES)}", file=sys.stderr)
            return 2
        return capture(modes, Path(os.environ.get("OUT") or CAPTURED / "packed"), extra)
    if len(argv) not in (1, 2) or not Path(argv[0]).is_dir():
        print("usage: python scripts/device_fixture.py capture [fused] [instrumented]  (on the device)\n"
              "       python scripts/device_fixture.py <returned files, outputs/device-fixture or "
              "outputs/device-check> [name]", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        runs = run_dirs(Path(argv[0]), tmp)
        if not runs:
            print(f"device_fixture: no profile-<mode>/ run directory in {argv[0]} (or its tarballs)", file=sys.stderr)
            return 2
        if len(argv) == 2 and len(runs) > 1:
            print("device_fixture: a name is for one run; this folder holds several", file=sys.stderr)
            return 2
        for run_dir in runs:
            dest = FIXTURES / (argv[1] if len(argv) == 2 else fixture_name(run_dir))
            if dest.exists():
                print(f"device_fixture: {dest} exists; remove it or name another fixture", file=sys.stderr)
                return 2
            try:
                written = collect(run_dir, dest, argv[0])
            except SystemExit as exc:
                shutil.rmtree(dest, ignore_errors=True)
                print(exc, file=sys.stderr)
                return 2
            total = sum(p.stat().st_size for p in written)
            print(f"device_fixture: wrote {dest.relative_to(ROOT)} ({len(written)} files, {total / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
