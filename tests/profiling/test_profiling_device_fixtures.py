"""A trace read on another machine: from the files scripts/device_fixture.py keeps, ``lbm analyze`` rebuilds the breakdown.

Real device traces live in tests/fixtures/device/<device>-<mode>/ (made by scripts/device_fixture.py from a short
profiled run on the device; its made.txt says how). For each, and for one the test generates itself (a short
profiled run of the pallas engine in interpret mode on the CPU, the default cylinder at 40x24, reduced to the files
a fixture keeps): ``lbm analyze`` gives, from those files alone, the breakdown the run computed (the same numbers),
every timed row on the device clock, and the stage rows hold every kernel of the window once.

On a TPU fixture, besides: both of the trace's forms (``*.trace.json.gz``, ``*.xplane.pb``) give the same
breakdown; the rows equal an independent reading of the raw trace JSON (tests/helpers/tpu_trace.py: ops by the
stage names in their tf_op, the step from the program runs); the stages sum to within 10 % of the step; the
per-kernel device times agree with XProf's offline converter on the same trace within 15 %
(scripts/device_verdict.py's criterion); kernels.csv carries the op's category, bytes and flops; an instrumented
run's report says the device idles and why.
"""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import pytest
from helpers.paths import FIXTURES
from helpers.runs import run_config
from helpers.scripts import load_script
from helpers.tpu_trace import raw_tpu_rows, raw_tpu_stage_rows

from lbm.cli import main
from lbm.profiling import breakdown

FIXTURES = FIXTURES / "device"
COMMITTED = sorted(p for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.is_dir() else []
TPU = [p for p in COMMITTED if json.loads((p / "metrics.json").read_text())["device"].startswith("tpu")]
TPU_PARAMS = [pytest.param(p, id=p.name, marks=pytest.mark.slow if "instrumented" in p.name else ()) for p in TPU]
"""The TPU fixtures as parameters: the fast lane analyses the fused one (the run's default mode, the same trace reader
and attribution); the instrumented one's analyses (1-3 s each) run in the full suite."""
verdict = load_script("device_verdict")
COMPARED = ("status", "calls", "clock", "mean_ms", "median_ms", "total_ms", "share", "contains")


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


def analyzed(target: Path, out: Path, capsys) -> Path:
    assert main(["analyze", str(target), "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def trace_file(fixture: Path, kind: str) -> Path:
    (path,) = (fixture / "profile").glob(f"plugins/profile/*/*.{kind}")
    return path


@pytest.mark.slow  # a profiled run of the interpreted pallas kernel: about 8 s; a TPU fixture's analysis: 1-3 s
@pytest.mark.parametrize("source", ["generated", *COMMITTED], ids=["generated", *(p.name for p in COMMITTED)])
def test_analyze_rebuilds_the_breakdown_from_the_fixtures_files(source, tmp_path, capsys):
    fixture = generated(tmp_path) if source == "generated" else source
    out = analyzed(fixture, tmp_path / "analyzed", capsys)
    recorded, rebuilt = read(fixture / "profile" / "breakdown.csv"), read(out / "breakdown.csv")
    assert list(rebuilt) == list(recorded)
    for stage, row in recorded.items():
        for key in COMPARED:
            assert rebuilt[stage][key] == row[key], (stage, key)
    timed = [r for r in recorded.values() if r["status"] in verdict.TIMED]
    # the bulk kernel's stages (the pallas scope names them) carry its time, in fused mode; every timed row on the
    # device clock
    if json.loads((fixture / "metrics.json").read_text())["mode"] == "fused":
        assert any({"collide", "stream"} <= set(r["stage"].split("+")) for r in timed)
    assert all(r["clock"] == "device" and float(r["total_ms"]) > 0 for r in timed)
    # every kernel of the window lands in exactly one row: the rows' device time is the kernels' (kernels.csv, one
    # line per kernel; equal up to the printed digits), so none is left out or counted twice. (Instrumented on a
    # CPU or GPU a stage's time is its execution's span, gaps included: there only fused rows are sums of kernels.)
    metrics = json.loads((fixture / "metrics.json").read_text())
    if metrics["mode"] == "fused" or metrics["device"].startswith("tpu"):
        kernels = sum(float(k["total_ms"]) for k in csv.DictReader((out / "kernels.csv").open()))
        assert sum(float(r["total_ms"]) for r in timed) == pytest.approx(kernels, rel=1e-4)
    # instrumented: the xla engine's stages, one jit each (engine "instrumented" in the fixture, recorded before
    # metrics.json's engine took the config's names)
    assert metrics["engine"] in (("xla", "instrumented") if metrics["mode"] == "instrumented" else ("pallas",))
    assert metrics["status"] == "completed"


@pytest.mark.parametrize("fixture", TPU_PARAMS)
def test_a_tpu_trace_adds_up_on_the_device_clock_in_both_forms(fixture, tmp_path, capsys):
    via_json = read(analyzed(trace_file(fixture, "trace.json.gz"), tmp_path / "json", capsys) / "breakdown.csv")
    via_pb = read(analyzed(trace_file(fixture, "xplane.pb"), tmp_path / "pb", capsys) / "breakdown.csv")
    assert list(via_pb) == list(via_json)
    for stage, row in via_json.items():  # the XPlane's times are whole ns as the JSON's µs with 3 decimals
        assert via_pb[stage]["status"] == row["status"] and via_pb[stage]["calls"] == row["calls"], stage
        if row["mean_ms"]:
            # abs 1e-6 ms: a difference row (unattributed = step - sum of stages) adds the two forms' roundings
            # of ~100 ops' times (measured: 1.7e-7 ms on the instrumented TPU fixture)
            assert float(via_pb[stage]["mean_ms"]) == pytest.approx(float(row["mean_ms"]), rel=1e-5, abs=1e-6), stage
    timed = [r for r in via_json.values() if r["status"] in verdict.TIMED]
    step, total, gap = via_json["timestep"], via_json["sum of stages"], via_json["unattributed"]
    assert step["clock"] == "device" and all(r["clock"] == "device" for r in timed)
    # stages + unattributed = step; the shares of the stage means add up to 100 %; the stages within 10 % of the step
    assert float(total["mean_ms"]) + float(gap["mean_ms"]) == pytest.approx(float(step["mean_ms"]), rel=1e-9)
    assert sum(float(r["share"]) for r in timed) == pytest.approx(1.0, rel=1e-9)
    ok, line = verdict.breakdown_verdict(list(via_json.values()))
    assert ok, line


@pytest.mark.parametrize("fixture", TPU_PARAMS)
def test_a_tpu_trace_equals_an_independent_reading_of_its_ops(fixture, tmp_path, capsys):
    # the trace alone (no compile report): every op by the stage names in its tf_op, so a broken scope mapping, a
    # lost op or a wrong program run shows here
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(trace_file(fixture, "trace.json.gz"), alone / "t.trace.json.gz")
    rows = read(analyzed(alone / "t.trace.json.gz", tmp_path / "out", capsys) / "breakdown.csv")
    with gzip.open(alone / "t.trace.json.gz", "rt") as fh:
        data = json.load(fh)
    stages = json.loads((fixture / "profile" / "compile" / "compile.json").read_text())["stages"]
    timed = {s: r for s, r in rows.items() if r["status"] in verdict.TIMED}
    if json.loads((fixture / "metrics.json").read_text())["mode"] == "fused":
        expect, step, steps = raw_tpu_rows(data, stages)
        assert int(rows["timestep"]["calls"]) == steps
    else:
        expect, step = raw_tpu_stage_rows(data, stages)
    assert set(timed) == set(expect)
    for unit, ms in expect.items():
        assert float(timed[unit]["mean_ms"]) == pytest.approx(ms, rel=1e-9), unit
    assert float(rows["timestep"]["mean_ms"]) == pytest.approx(step, rel=1e-9)


@pytest.mark.parametrize("fixture", TPU_PARAMS)
def test_a_tpu_traces_kernels_agree_with_xprof(fixture, tmp_path, capsys):
    out = analyzed(fixture, tmp_path / "a", capsys)
    kernels = list(csv.DictReader((out / "kernels.csv").open()))
    ok, line = verdict.xprof_verdict(kernels, verdict.xprof_rows(fixture / "profile"))
    assert ok, line
    assert "by program and name" in line
    # what the trace says of each op: its category, bytes and flops per call, its program
    assert all(k["category"] and k["bytes_per_call"] and k["model_flops_per_call"] and k["program_id"] for k in kernels)
    doc = json.loads((out / "breakdown.json").read_text())
    assert doc["headline"] == "device" and doc["attribution"]["device_events"].startswith("a TPU's XLA Ops")
    idle = [n for n in doc["notes"] if n.startswith("the device idles")]
    step = read(out / "breakdown.csv")["timestep"]
    host = float(read(out / "breakdown_host.csv")["timestep"]["mean_ms"])
    # the note where (and only where) the device works under half the host's step: the instrumented default cylinder
    # (0.29 of 3.65 ms), not the instrumented 3D cavity 66^3 (2.67 ms on the device, 1.79 on the host)
    assert bool(idle) == (float(step["mean_ms"]) < breakdown.IDLE_SHARE * host), (step["mean_ms"], host)
    if doc["mode"] == "instrumented" and idle:  # one dispatch per stage: the device waits for the host
        assert "one jit per stage" in idle[0] and "host clock" in idle[0]
    else:  # the unscoped kernels are named by their source line
        unscoped = read(out / "breakdown.csv").get("(unscoped)")
        assert unscoped is None or ".py:" in unscoped["ops"].split(";")[0]
