"""A trace read on another machine: from the files scripts/device_fixture.py keeps, ``lbm analyze`` rebuilds the breakdown.

The fixture of a real GPU run lives in tests/data/device/<gpu model>/ (made by scripts/device_fixture.py from
what scripts/device_check.sh left; its made.txt says how). Until one exists, the test generates its own: a short
profiled run of the pallas engine (interpret mode on the CPU, the default cylinder at 40x24), from which only the
files the fixture keeps are copied into a fresh folder, the trace (``*.trace.json.gz``) and the compile report
(``compile/compile.json``). For each: ``lbm analyze`` gives, from those files alone, the breakdown the run
computed (stage, status, calls, clock, device times and shares: the same numbers), every timed row is on the device clock,
and the stage rows hold every kernel of the window once.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from conftest import load_script, run_config

from lbm.cli import main

DEVICE = Path(__file__).parent / "data" / "device"
COMMITTED = sorted(p for p in DEVICE.iterdir() if p.is_dir()) if DEVICE.is_dir() else []
verdict = load_script("device_verdict")


def read(path: Path) -> dict[str, dict[str, str]]:
    return {r["stage"]: r for r in csv.DictReader(path.open())}


def generated(tmp_path: Path) -> Path:
    """A profiled pallas run reduced to the files a device fixture keeps (its layout: profile/...)."""
    from lbm.simulation import simulate

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    simulate(run_config("grid.nx=40", "grid.ny=24", "engine=pallas", "steps=20", "output.every=0",
                        "output.plots=false", "output.progress=none", "profile.enabled=true",
                        "profile.warmup_steps=2", "profile.steps=4"), run_dir)
    fixture = tmp_path / "fixture"
    (trace,) = (run_dir / "profile").glob("plugins/profile/*/*.trace.json.gz")
    for src, dest in ((trace, f"profile/plugins/profile/run/{trace.name}"),
                      (run_dir / "profile" / "compile" / "compile.json", "profile/compile/compile.json"),
                      (run_dir / "profile" / "breakdown.csv", "profile/breakdown.csv"),
                      (run_dir / "metrics.json", "metrics.json")):
        (fixture / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, fixture / dest)
    return fixture


@pytest.mark.slow  # a profiled run of the interpreted pallas kernel: about 8 s
@pytest.mark.parametrize("source", ["generated", *COMMITTED], ids=["generated", *(p.name for p in COMMITTED)])
def test_analyze_rebuilds_the_breakdown_from_the_fixtures_files(source, tmp_path, capsys):
    fixture = generated(tmp_path) if source == "generated" else source
    out = tmp_path / "analyzed"
    assert main(["analyze", str(fixture), "--out", str(out)]) == 0
    capsys.readouterr()
    recorded, rebuilt = read(fixture / "profile" / "breakdown.csv"), read(out / "breakdown.csv")
    assert list(rebuilt) == list(recorded)
    for stage, row in recorded.items():
        for key in ("status", "calls", "clock", "mean_ms", "median_ms", "total_ms", "share", "contains"):
            assert rebuilt[stage][key] == row[key], (stage, key)
    timed = [r for r in recorded.values() if r["status"] in verdict.TIMED]
    # the bulk kernel's stages (the pallas scope names them) carry its time; every timed row on the device clock
    assert any({"collide", "stream"} <= set(r["stage"].split("+")) for r in timed)
    assert all(r["clock"] == "device" and float(r["total_ms"]) > 0 for r in timed)
    # every kernel of the window lands in exactly one row: the rows' device time is the kernels' (kernels.csv, one
    # line per kernel; equal up to the printed digits), so none is left out or counted twice
    kernels = sum(float(k["total_ms"]) for k in csv.DictReader((out / "kernels.csv").open()))
    assert sum(float(r["total_ms"]) for r in timed) == pytest.approx(kernels, rel=1e-4)
    metrics = json.loads((fixture / "metrics.json").read_text())
    assert metrics["engine"] == "pallas" and metrics["status"] == "completed"
