"""Profiling changes nothing it measures: a profiled run reports the physics of the same run unprofiled, its MLUPS
leave the profiled steps out, and its breakdown adds up: real jax.profiler captures and ``analyze`` (all three marked
slow, a run unprofiled and profiled each; the fast lane reads synthetic traces,
tests/profiling/test_profiling_pipeline.py and tests/profiling/test_profiling_tracedb.py, and a real TPU trace,
tests/profiling/test_profiling_device_fixtures.py's fused fixture)."""

import json
import math

import pytest
from helpers.reports import read_csv, stage_rows
from helpers.runs import run_config

from lbm.cli import main
from lbm.simulation import simulate

# DESIGN.md, "What profile/ holds": breakdown.csv has at least these columns (written here, not taken from lbm)
DESIGN_COLUMNS = ["stage", "calls", "first_call_ms", "median_ms", "mean_ms", "p95_ms", "total_ms", "share", "clock"]
TG = ["case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=16", "output.every=4", "output.plots=false",
      "output.progress=none"]
WINDOW = ["profile.warmup_steps=2", "profile.steps=4"]


def pair(tmp_path, *overrides):
    """(unprofiled metrics, profiled metrics, profiled run directory) of the same run."""
    plain = simulate(run_config(*overrides, "profile.enabled=false"), tmp_path / "plain")
    prof_dir = tmp_path / "profiled"
    profiled = simulate(run_config(*overrides, "profile.enabled=true", *WINDOW), prof_dir)
    return plain, profiled, prof_dir


def check_breakdown(profile_dir):
    """breakdown.csv: DESIGN's columns once each, one clock, shares of the mean per step over the stage rows adding
    to 1, the sum row and the unattributed gap consistent with the step; stage names whole in the JSON and the text."""
    header, rows = read_csv(profile_dir / "breakdown.csv")
    assert set(DESIGN_COLUMNS) <= set(header) and len(header) == len(set(header))
    assert len({r["clock"] for r in rows}) == 1
    timed = [r for r in rows if r["share"] != ""]
    total = sum(float(r["mean_ms"]) for r in timed)
    assert timed and sum(float(r["share"]) for r in timed) == pytest.approx(1.0, abs=1e-9)
    for r in timed:
        assert float(r["share"]) == pytest.approx(float(r["mean_ms"]) / total, rel=1e-9)
    by = {r["stage"]: r for r in rows}
    step = float(by["timestep"]["mean_ms"])
    assert float(by["sum of stages"]["mean_ms"]) == pytest.approx(total, rel=1e-9)
    assert float(by["unattributed"]["mean_ms"]) == pytest.approx(step - total, rel=1e-9, abs=1e-12)
    doc = json.loads((profile_dir / "breakdown.json").read_text())
    text = (profile_dir / "breakdown.txt").read_text()
    for r in doc["rows"]:
        assert r["stage"] in by and r["stage"] in text  # every name whole in all three files
    assert "…" not in text and text.count("compile: ") == 1
    return doc, by


@pytest.mark.slow  # two runs and a profiler capture: 6 s of the cold fast lane's 97 (2 cores)
def test_profiled_fused_run_reports_the_same_physics(tmp_path):
    """A real jax.profiler capture (tiny): fused xla engine, chunks of 4 steps."""
    plain, profiled, run_dir = pair(tmp_path, *TG, "engine=xla")
    assert profiled["decay_rel_error_max"] == pytest.approx(plain["decay_rel_error_max"], abs=1e-12)
    assert profiled["mass_rel_drift"] == pytest.approx(plain["mass_rel_drift"], abs=1e-12)
    # the window: whole chunks of the run (one warm-up chunk, one steady), said in metrics.json
    window = profiled["profiled_steps"]
    assert (window["first_step"], window["end_step"], window["steps"], window["chunk_steps"]) == (0, 8, 8, 4)
    assert "profiled_steps" not in plain
    # mlups leaves the profiled window out: the 8 other steps over the loop time they took
    rest_s = profiled["wall_time_s"] - window["loop_seconds"]
    assert profiled["mlups"] == pytest.approx(256 * 8 / rest_s / 1e6, rel=1e-9)
    assert set(profiled["compile_times_s"]) == set(plain["compile_times_s"]) == {"fused[4]"}  # no chunk of its own
    doc, by = check_breakdown(run_dir / "profile")
    assert doc["headline"] == "device" and by["timestep"]["clock"] == "device"
    assert int(by["timestep"]["calls"]) == 4 == doc["window"]["steady_steps"]
    assert doc["window"]["steady_calls"] == 1  # one dispatch: the run's own chunk
    assert doc["compile"]["compile_ms"] > 0 and doc["compile"]["first_run_steps"] == 4
    host = stage_rows(run_dir / "profile" / "breakdown_host.csv")
    assert host["timestep"]["clock"] == "host" and int(host["timestep"]["calls"]) == 4
    # analyze rebuilds the same breakdown from the run directory
    out = tmp_path / "analysis"
    assert main(["analyze", str(run_dir), "--out", str(out)]) == 0
    again = stage_rows(out / "breakdown.csv")
    assert {k: (r["mean_ms"], r["share"]) for k, r in again.items()} == {k: (r["mean_ms"], r["share"]) for k, r in by.items()}


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08\x00garbage", b'{"not": "a trace"}', b"\x00\x01binary"])
def test_analyze_bad_file_is_one_line(tmp_path, capsys, content):
    f = tmp_path / "t.trace.json.gz"
    f.write_bytes(content)
    code = main(["analyze", str(f)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("lbm: error: ") and "Traceback" not in err[0]
    assert not (tmp_path / "analysis").exists()


def test_analyze_missing_and_foreign(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nope")]) == 2
    (tmp_path / "x.xplane.pb").write_bytes(b"not a protobuf at all")
    assert main(["analyze", str(tmp_path / "x.xplane.pb")]) == 2
    (tmp_path / "other.json").write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2,
                                                                      "pid": 1, "tid": 1}]}))
    assert main(["analyze", str(tmp_path / "other.json")]) == 2
    assert main(["analyze", str(tmp_path / "other.json"), "--sql", "SELECT name FROM slice"]) == 0
    assert main(["analyze", str(tmp_path), "--bogus"]) == 2
    errs = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("lbm: error")]
    assert len(errs) == 4 and "no lbm 'timestep'" in errs[2]


@pytest.mark.slow  # two instrumented runs (about 6 s)
def test_profiled_instrumented_run_reports_the_same_physics(tmp_path):
    plain, profiled, run_dir = pair(tmp_path, *TG, "mode=instrumented")
    assert profiled["decay_rel_error_max"] == pytest.approx(plain["decay_rel_error_max"], abs=1e-12)
    assert profiled["profiled_steps"]["steps"] == 8
    doc, by = check_breakdown(run_dir / "profile")
    assert doc["headline"] == "device" and int(by["timestep"]["calls"]) == 4


@pytest.mark.slow  # two cylinder runs (about 10 s)
def test_profiled_cylinder_reports_the_same_statistics(tmp_path):
    plain, profiled, run_dir = pair(tmp_path, "grid.nx=60", "grid.ny=36", "steps=40", "output.every=4",
                                    "flow.reynolds=20", "output.plots=false", "output.progress=none", "engine=xla")
    for key in ("cd_mean", "cl_amplitude", "mass_rel_drift"):
        a, b = plain[key], profiled[key]
        assert (a is None and b is None) or (math.isfinite(a) and a == pytest.approx(b, abs=1e-12)), key
    _, by = check_breakdown(run_dir / "profile")
    unscoped = by.get("(unscoped)")
    if unscoped is not None:  # every kernel without a stage scope is named with its HLO op and what it reads
        for item in unscoped["ops"].split("; reads")[0:1]:
            assert "HLO " in item
