"""Issue 10's real-device criteria (GPU, TPU), read off what scripts/device_check.sh leaves, one PASS/FAIL line each.

  python scripts/device_verdict.py outputs/device-check     # the script's folder (device_check.sh runs this)
  python scripts/device_verdict.py <files_at of the run tool>  # the returned copies: bench-*.json, breakdown-*.csv

The criteria (issue 10, "How this will be judged", on a real GPU):
  1. bandwidth: the pallas engine, float32, at 1024^2 cells and above (D2Q9 1024^2, D3Q19 128^3), reaches >= 75 %
     of the device bandwidth measured in the same bench run (bench.json's ``fraction_of_roofline``: the minimum
     bytes per cell update, 2 Q x 4 B, at the measured MLUPS, over that bandwidth); the periodic box is the
     criterion, the cylinder is reported beside it;
  2. breakdown, each mode (fused, instrumented; issue 37 item 3): the profile's stage rows (every timed row:
     measured, fused groups, unscoped kernels) on the device clock, their mean per step summed (the ``sum of stages``
     row), equal the step's device mean (the ``timestep`` row: fused, the chunk's device time per step;
     instrumented on a TPU, the step's program runs summed) within 10 %: the ``unattributed`` gap is at most a tenth
     of the step. Instrumented on a GPU or CPU (metrics.json's device) it is reported, not judged: there the step's
     device time is its window, the waits between dispatches included;
  3. xprof, each mode (issue 20, item 6; issue 37 item 3 on a TPU; on a CPU trace XProf's converter returns no
     ops): the per-kernel device times lbm reads from the trace (kernels.csv: mean per call) equal XProf's offline
     converter's (``xprof.convert.raw_to_tool_data.xspace_to_tool_data([xplane], "hlo_stats", {})``: total_time /
     occurrences) within 15 % for every kernel holding at least 1 % of the window's device time; a kernel is
     XProf's row of the same program and name where both name the program (a TPU's program_id: instrumented mode
     runs a program per stage, with op names such as copy.3 in several), else of the same name; and the kernels
     found in XProf's table hold at least 90 % of the window's device time. Read from ``xprof_hlo_stats.json``
     (device_check.sh writes it where xprof is importable) or converted here from the ``*.xplane.pb`` when xprof
     is importable; without either it is not judged (INFO).
Exit status: 0 when every criterion that has data passes, 1 otherwise (missing data is a failure too).
"""

from __future__ import annotations

import csv
import json
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

MIN_FRACTION = 0.75
MIN_CELLS = 1024 * 1024
BREAKDOWN_TOLERANCE = 0.10
TIMED = ("measured", "fused-group", "unscoped")
XPROF_TOLERANCE = 0.15
XPROF_MIN_SHARE = 0.01
XPROF_MIN_COVERAGE = 0.90
XPROF_FILE = "xprof_hlo_stats.json"
MODES = ("fused", "instrumented")


def bandwidth_verdicts(doc: dict[str, Any]) -> list[tuple[bool | None, str]]:
    """One (passed, line) per pallas float32 record of a bench.json at MIN_CELLS or more; passed None: reported only."""
    out: list[tuple[bool | None, str]] = []
    bandwidth = (doc.get("bandwidth") or {}).get("bandwidth_gbs")
    for r in doc.get("records", []):
        if r.get("engine") != "pallas" or r.get("precision") != "float32" or r.get("cells", 0) < MIN_CELLS:
            continue
        fraction = r.get("fraction_of_roofline")
        grid = "x".join(map(str, r["grid"]))
        line = (f"{r['lattice']} {r['case']} {grid}: {r['mlups']['median']:.0f} MLUPS, "
                f"{'-' if fraction is None else f'{100 * fraction:.1f}'} % of the same-run bandwidth "
                f"({'-' if bandwidth is None else f'{bandwidth:.0f}'} GB/s; target >= {100 * MIN_FRACTION:.0f} %)")
        if r["case"] != "periodic":
            out.append((None, line + " [reported]"))
        else:
            out.append((fraction is not None and fraction >= MIN_FRACTION, line))
    return out


def breakdown_verdict(rows: list[dict[str, str]], doc: dict[str, Any] | None = None) -> tuple[bool, str]:
    """Whether the device table's stage rows sum (mean per step) to the step's device mean within the tolerance."""
    by = {r["stage"]: r for r in rows}
    step = by.get("timestep") or {}
    if step.get("clock") != "device" or not step.get("mean_ms"):
        return False, "no device time for the step in breakdown.csv (the timestep row on the device clock)"
    per_step = sum(float(r["mean_ms"]) for r in rows if r["status"] in TIMED and r.get("mean_ms"))
    span = float(step["mean_ms"])
    ratio = per_step / span
    line = (f"stages sum to {per_step:.4f} ms per step on the device; the step's device time {span:.4f} ms: "
            f"ratio {ratio:.3f} (target: within {100 * BREAKDOWN_TOLERANCE:.0f} % of the step)")
    return abs(ratio - 1) <= BREAKDOWN_TOLERANCE, line


def gviz_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A Google Visualization DataTable (XProf's tool output: ``cols`` with ids, ``rows`` of ``c`` cells) as dicts."""
    ids = [c.get("id") for c in doc.get("cols", [])]
    return [{k: (cell or {}).get("v") for k, cell in zip(ids, r.get("c", []), strict=False)} for r in doc.get("rows", [])]


def xprof_hlo_stats(xplane: Path) -> list[dict[str, Any]] | None:
    """XProf's hlo_stats of an ``*.xplane.pb`` as rows; None when xprof is not importable or gives nothing."""
    try:
        from xprof.convert.raw_to_tool_data import xspace_to_tool_data
    except ImportError:
        return None
    data, _ = xspace_to_tool_data([str(xplane)], "hlo_stats", {})
    if not data:
        return None
    return gviz_rows(json.loads(data.decode() if isinstance(data, bytes) else data))


def xprof_comparison(kernels: list[dict[str, str]], hlo_stats: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per kernel of kernels.csv, costliest first: its share of the window's device time, lbm's mean µs per call and
    XProf's (total_time / occurrences) from the row of the same program and name where both name the program (a
    TPU's program_id: instrumented mode runs a program per stage, with op names such as copy.3 in several), else
    of the same name (a name in several programs: the row with the most occurrences); None where XProf has none."""
    by_program: dict[tuple[str, str], tuple[float, float]] = {}
    by_name: dict[str, tuple[float, float]] = {}
    for r in hlo_stats:
        name, n = str(r.get("hlo_op_name") or ""), float(r.get("occurrences") or 0)
        if n <= 0:
            continue
        mean = float(r.get("total_time") or 0.0) / n
        if r.get("program_id") not in (None, ""):
            by_program[(str(r["program_id"]), name)] = (mean, n)
        if name not in by_name or n > by_name[name][1]:
            by_name[name] = (mean, n)
    total = sum(float(k["total_ms"]) for k in kernels) or 1.0
    out = []
    for k in sorted(kernels, key=lambda k: -float(k["total_ms"])):
        program = str(k.get("program_id") or "")
        match = by_program.get((program, k["kernel"])) if program and by_program else by_name.get(k["kernel"])
        ours = float(k["total_ms"]) * 1e3 / int(k["calls"])
        out.append({"kernel": k["kernel"], "unit": k.get("unit", ""), "calls": int(k["calls"]),
                    "share": float(k["total_ms"]) / total, "lbm_us": ours, "xprof_us": None if match is None else match[0],
                    "xprof_calls": None if match is None else int(match[1]),
                    "by": "program and name" if program and by_program else "name"})
    return out


def xprof_verdict(kernels: list[dict[str, str]], hlo_stats: list[dict[str, Any]] | None) -> tuple[bool | None, str]:
    """lbm's per-kernel mean device time (kernels.csv) against XProf's (:func:`xprof_comparison`)."""
    if hlo_stats is None:
        return None, "not judged: no xprof_hlo_stats.json and xprof is not importable here (pip install xprof)"
    if not hlo_stats:
        return False, "XProf's hlo_stats holds no ops (a CPU trace gives none: this check needs a GPU or TPU trace)"
    if not sum(float(k["total_ms"]) for k in kernels):
        return False, "kernels.csv holds no device time"
    rows = xprof_comparison(kernels, hlo_stats)
    coverage = sum(r["share"] for r in rows if r["xprof_us"] is not None)
    big = [r for r in rows if r["share"] >= XPROF_MIN_SHARE]
    bad, worst = [], 0.0
    for r in big:
        if r["xprof_us"] is None:
            bad.append(f"{r['kernel']}: not in XProf's hlo_stats")
            continue
        diff = abs(r["lbm_us"] / r["xprof_us"] - 1) if r["xprof_us"] else float("inf")
        worst = max(worst, diff)
        if diff > XPROF_TOLERANCE:
            bad.append(f"{r['kernel']}: lbm {r['lbm_us']:.2f} µs, XProf {r['xprof_us']:.2f} µs")
    how = rows[0]["by"] if rows else "name"
    line = (f"{len(big)} kernels with >= {100 * XPROF_MIN_SHARE:.0f} % of the device time; largest difference of "
            f"their mean per call {100 * worst:.1f} % (target: within {100 * XPROF_TOLERANCE:.0f} %); "
            f"{100 * coverage:.1f} % of the device time in kernels found in XProf's table by {how} (target: >= "
            f"{100 * XPROF_MIN_COVERAGE:.0f} %)")
    if bad:
        line += "; " + "; ".join(bad[:5])
    return not bad and coverage >= XPROF_MIN_COVERAGE, line


def xprof_rows(profile: Path) -> list[dict[str, Any]] | None:
    """XProf's hlo_stats beside a profile: the saved json, else converted from the xplane (xprof importable)."""
    saved = profile / XPROF_FILE
    if saved.exists():
        return gviz_rows(json.loads(saved.read_text()))
    planes = sorted(profile.glob("plugins/profile/*/*.xplane.pb"))
    return xprof_hlo_stats(planes[0]) if planes else None


def _find(folder: Path, *candidates: str) -> Path | None:
    """The first of ``candidates`` (paths relative to ``folder``) that exists."""
    return next((folder / c for c in candidates if (folder / c).exists()), None)


def unpacked(folder: Path, tmp: str) -> Path | None:
    """device_check.sh's folder: ``folder`` itself, or for the run tool's returned copies its device-check.tgz
    unpacked into ``tmp``; None when the tarball holds no summary.txt."""
    packed = folder / "device-check.tgz"
    if not packed.exists() or (folder / "profile-fused").exists():
        return folder
    with tarfile.open(packed) as tar:
        tar.extractall(tmp, filter="data")
    summary = next(Path(tmp).rglob("summary.txt"), None)
    return None if summary is None else summary.parent


def verdicts(folder: Path) -> list[tuple[bool | None, str]]:
    """Every criterion's (passed, line) for device_check.sh's folder or the run tool's returned copies."""
    with tempfile.TemporaryDirectory() as tmp:
        return _verdicts(unpacked(folder, tmp) or folder)


def _verdicts(folder: Path) -> list[tuple[bool | None, str]]:
    """The criteria read off device_check.sh's (unpacked) folder."""
    out: list[tuple[bool | None, str]] = []
    for lat in ("d2q9", "d3q19"):
        path = _find(folder, f"bench-{lat}/bench.json", f"bench-{lat}.json")
        if path is None:
            out.append((False, f"bandwidth {lat}: no bench.json"))
            continue
        found = bandwidth_verdicts(json.loads(path.read_text()))
        out += [(ok, f"bandwidth {line}") for ok, line in found] or [
            (False, f"bandwidth {lat}: no pallas float32 record at {MIN_CELLS} cells or more in {path.name}")]
    for mode in MODES:
        csv_path = _find(folder, f"profile-{mode}/profile/breakdown.csv", f"breakdown-{mode}.csv")
        metrics = folder / f"profile-{mode}" / "metrics.json"
        device = str(json.loads(metrics.read_text()).get("device") or "") if metrics.exists() else ""
        if csv_path is None:
            out.append((False, f"breakdown {mode}: no breakdown.csv (device-check.tgz holds it)"))
        elif mode == "instrumented" and device and not device.startswith("tpu"):
            out.append((None, f"breakdown {mode}: not judged on {device}: there an instrumented step's device time "
                              "is its window, first kernel start to last kernel end, the waits between the stage "
                              "dispatches included (a TPU's is its program runs summed)"))
        else:
            ok, line = breakdown_verdict(list(csv.DictReader(csv_path.open())))
            out.append((ok, f"breakdown {mode}: {line}"))
        profile = folder / f"profile-{mode}" / "profile"
        kernels = profile / "kernels.csv"
        if kernels.exists():
            found = xprof_verdict(list(csv.DictReader(kernels.open())), xprof_rows(profile))
            out.append((found[0], f"xprof {mode}: {found[1]}"))
        else:
            out.append((None, f"xprof {mode}: not judged (no profile-{mode}/profile/kernels.csv)"))
    return out


def main(argv: list[str]) -> int:
    """Print one line per criterion; 0 when all that are judged pass."""
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python scripts/device_verdict.py <outputs/device-check or the returned files' folder>",
              file=sys.stderr)
        return 2
    results = verdicts(Path(argv[0]))
    for ok, line in results:
        print(f"{'PASS' if ok else 'FAIL' if ok is False else 'INFO'}  {line}")
    return 0 if all(ok is not False for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
