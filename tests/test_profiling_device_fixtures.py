"""Traces recorded by scripts/device_check.sh on another machine (tests/data/device/<name>/, scripts/device_fixture.py).

``cpu-rehearsal``: the check's rehearsal on a 2-core CPU (jax 0.11.2, the pallas kernel in interpret mode, the
default cylinder at 40x24). A real GPU's folder joins it when a session with a GPU runs the check. For each:
``lbm analyze`` rebuilds, from the trace and the compile report alone, the breakdown the machine computed (stage,
status, calls and device times: the same numbers), every timed row is on the device clock, and the stage device
times add up to the step's kernel time (scripts/device_verdict.py reads the same sums for issue 10's criterion).
"""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from lbm.cli import main

DEVICE = Path(__file__).parent / "data" / "device"
FIXTURES = sorted(p for p in DEVICE.iterdir() if p.is_dir())
_spec = importlib.util.spec_from_file_location("device_verdict", DEVICE.parents[2] / "scripts" / "device_verdict.py")
verdict = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verdict)


def read(path: Path) -> dict[str, dict[str, str]]:
    return {r["stage"]: r for r in csv.DictReader(path.open())}


def test_the_rehearsal_fixture_is_there():
    assert "cpu-rehearsal" in [p.name for p in FIXTURES]


@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.name for p in FIXTURES])
def test_analyze_rebuilds_the_machines_breakdown(fixture, tmp_path, capsys):
    assert main(["analyze", str(fixture), "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    recorded, rebuilt = read(fixture / "profile" / "breakdown.csv"), read(tmp_path / "breakdown.csv")
    assert list(rebuilt) == list(recorded)
    for stage, row in recorded.items():
        for key in ("status", "calls", "clock", "device_median_ms", "device_total_ms", "contains"):
            assert rebuilt[stage][key] == row[key], (stage, key)
    timed = [r for r in recorded.values() if r["status"] in verdict.TIMED]
    # the bulk kernel's stages (the pallas scope names them) carry its time; every timed row on the device clock
    assert any({"collide", "stream"} <= set(r["stage"].split("+")) for r in timed)
    assert all(r["clock"].startswith("device:") and float(r["device_total_ms"]) > 0 for r in timed)
    # the rows' device time per step equals the sum of the step's kernel durations: every kernel lands in one row
    # (measured 0.998 on the rehearsal; a kernel left out or counted twice moves it by its share of the step)
    doc = json.loads((tmp_path / "breakdown.json").read_text())
    steps = doc["attribution"]["steady_steps"]
    per_step = sum(float(r["device_total_ms"]) for r in timed) / steps
    assert per_step == pytest.approx(doc["timestep"]["device_busy_median_ms"], rel=0.05)
    metrics = json.loads((fixture / "metrics.json").read_text())
    assert metrics["engine"] == "pallas" and metrics["status"] == "completed"


@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.name for p in FIXTURES])
def test_the_bench_files_hold_pallas_and_xla_with_the_same_run_bandwidth(fixture):
    for lat in ("d2q9", "d3q19"):
        doc = json.loads((fixture / f"bench-{lat}.json").read_text())
        assert doc["bandwidth"]["bandwidth_gbs"] > 0
        engines = {(r["case"], r["engine"]) for r in doc["records"]}
        assert engines == {(c, e) for c in ("periodic", "cylinder") for e in ("pallas", "xla")}, engines
        for r in doc["records"]:  # fraction of the roofline: the minimum bytes at the measured rate over the bandwidth
            expected = r["mlups"]["median"] * 1e6 * r["bytes_per_cell_update"] / (doc["bandwidth"]["bandwidth_gbs"] * 1e9)
            assert r["fraction_of_roofline"] == pytest.approx(expected, rel=1e-6)
