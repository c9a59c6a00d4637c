"""Issue 10's real-GPU criteria, read off what scripts/device_check.sh leaves, one PASS/FAIL line each.

  python scripts/device_verdict.py outputs/device-check     # the script's folder (device_check.sh runs this)
  python scripts/device_verdict.py <files_at of the run tool>  # the returned copies: bench-*.json, breakdown-*.csv

The criteria (issue 10, "How this will be judged", on a real GPU):
  1. bandwidth: the pallas engine, float32, at 1024^2 cells and above (D2Q9 1024^2, D3Q19 128^3), reaches >= 75 %
     of the device bandwidth measured in the same bench run (bench.json's ``fraction_of_roofline``: the minimum
     bytes per cell update, 2 Q x 4 B, at the measured MLUPS, over that bandwidth); the periodic box is the
     criterion, the cylinder is reported beside it;
  2. breakdown: the fused profile's stage device times (every timed row: measured, fused groups, unscoped
     kernels), summed per step, equal the step's device time within 10 %: the trace's step span (first kernel
     start to last kernel end; ``timestep.device_median_ms``) and, for reference, the sum of the step's kernel
     durations (``device_busy_median_ms``).
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


def breakdown_verdict(rows: list[dict[str, str]], doc: dict[str, Any]) -> tuple[bool, str]:
    """Whether the timed rows' device time per step sums to the step's device span within BREAKDOWN_TOLERANCE."""
    steps = (doc.get("attribution") or {}).get("steady_steps") or doc["timestep"]["calls"]
    total = sum(float(r["device_total_ms"]) for r in rows if r["status"] in TIMED and r["device_total_ms"])
    per_step = total / steps
    span = doc["timestep"].get("device_median_ms")
    busy = doc["timestep"].get("device_busy_median_ms")
    if not span:
        return False, "no device time for the step in breakdown.json (timestep.device_median_ms)"
    ratio = per_step / span
    line = (f"stages sum to {per_step:.4f} ms per step on the device; the step's device span {span:.4f} ms: "
            f"ratio {ratio:.3f}" + (f"; its kernels' busy time {busy:.4f} ms: ratio {per_step / busy:.3f}" if busy else "")
            + f" (target: within {100 * BREAKDOWN_TOLERANCE:.0f} % of the span)")
    return abs(ratio - 1) <= BREAKDOWN_TOLERANCE, line


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
    csv_path = _find(folder, "profile-fused/profile/breakdown.csv", "breakdown-fused.csv")
    json_path = _find(folder, "profile-fused/profile/breakdown.json")
    if csv_path is None or json_path is None:
        out.append((False, "breakdown fused: no breakdown.csv and breakdown.json (device-check.tgz holds both)"))
    else:
        ok, line = breakdown_verdict(list(csv.DictReader(csv_path.open())), json.loads(json_path.read_text()))
        out.append((ok, f"breakdown fused: {line}"))
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
