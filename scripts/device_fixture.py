"""Turn what scripts/device_check.sh left into a test fixture under tests/data/device/<name>/ (at most 2 MB).

  python scripts/device_fixture.py outputs/device-check            # name from the bench's GPU model
  python scripts/device_fixture.py <files_at of the run tool> h200  # the returned files (device-check.tgz inside)

The fixture holds what ``lbm analyze`` needs to rebuild the fused run's breakdown on another machine: the
jax.profiler trace (``*.trace.json.gz``) and the compile report (``compile/compile.json``, which maps the fused
kernels to their stages), laid out as a run directory's ``profile/``; beside them the breakdown the device
computed (``profile/breakdown.csv``, ``profile/kernels.csv``), XProf's per-kernel times where xprof ran
(``profile/xprof_hlo_stats.json``: device_verdict.py's cross-check), the run's ``metrics.json``, the two
``bench-*.json``, ``summary.txt`` and ``made.txt`` (how the fixture was made).
tests/test_profiling_device_fixtures.py checks every fixture folder: analyze gives the committed breakdown.
An existing fixture of the same name is never overwritten.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

from device_verdict import unpacked  # scripts/ is on sys.path when this script runs

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 2 * 2**20
"""Issue 10: a small real trace, at most 2 MB, with its bench.json and its breakdown."""


def fixture_name(folder: Path) -> str:
    """A folder name from the bench's device: the GPU model (e.g. nvidia-h200), else the device kind."""
    env = json.loads((folder / "bench-d2q9" / "bench.json").read_text()).get("environment", {})
    label = env.get("gpu_model") or env.get("device_kind") or "device"
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def collect(folder: Path, dest: Path, source: str) -> list[Path]:
    """Copy the fixture's files from device_check.sh's ``folder`` (given as ``source``) into ``dest``; the paths written."""
    profile = folder / "profile-fused" / "profile"
    traces = sorted(profile.glob("plugins/profile/*/*.trace.json.gz"))
    if len(traces) != 1:
        raise SystemExit(f"device_fixture: expected one *.trace.json.gz under {profile}/plugins/profile, found "
                         f"{len(traces)}")
    files = {traces[0]: dest / "profile" / "plugins" / "profile" / "run" / traces[0].name,
             profile / "compile" / "compile.json": dest / "profile" / "compile" / "compile.json",
             profile / "breakdown.csv": dest / "profile" / "breakdown.csv",
             folder / "profile-fused" / "metrics.json": dest / "metrics.json",
             folder / "summary.txt": dest / "summary.txt"}
    files |= {folder / f"bench-{lat}" / "bench.json": dest / f"bench-{lat}.json" for lat in ("d2q9", "d3q19")}
    for name in ("kernels.csv", "xprof_hlo_stats.json"):  # lbm's per-kernel times and XProf's, where it ran
        if (profile / name).exists():
            files[profile / name] = dest / "profile" / name
    missing = [str(src) for src in files if not src.exists()]
    if missing:
        raise SystemExit(f"device_fixture: missing {', '.join(missing)}")
    size = sum(src.stat().st_size for src in files)
    if size > LIMIT:
        raise SystemExit(f"device_fixture: {size} bytes, over the {LIMIT}-byte limit: profile fewer steps "
                         "(profile.steps) and run the device check again")
    for src, target in files.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
    made = dest / "made.txt"  # how the fixture was made, for whoever reads tests/data
    made.write_text(f"Made by scripts/device_fixture.py from {source} (what scripts/device_check.sh left; its "
                    "summary.txt beside this file lists the steps, the device and the commands).\n")
    return [*files.values(), made]


def main(argv: list[str]) -> int:
    """Write tests/data/device/<name>/ from device_check.sh's results; 2 on bad input."""
    if len(argv) not in (1, 2) or not Path(argv[0]).is_dir():
        print("usage: python scripts/device_fixture.py <outputs/device-check or the returned files> [name]",
              file=sys.stderr)
        return 2
    folder = Path(argv[0])
    with tempfile.TemporaryDirectory() as tmp:
        folder = unpacked(folder, tmp)
        if folder is None:
            print(f"device_fixture: no summary.txt in {argv[0]}/device-check.tgz", file=sys.stderr)
            return 2
        name = argv[1] if len(argv) == 2 else fixture_name(folder)
        dest = ROOT / "tests" / "data" / "device" / name
        if dest.exists():
            print(f"device_fixture: {dest} exists; remove it or name another fixture", file=sys.stderr)
            return 2
        try:
            written = collect(folder, dest, argv[0])
        except SystemExit as exc:
            shutil.rmtree(dest, ignore_errors=True)
            print(exc, file=sys.stderr)
            return 2
    total = sum(p.stat().st_size for p in written)
    print(f"device_fixture: wrote {dest.relative_to(ROOT)} ({len(written)} files, {total / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
