"""Real profiled runs of small cases: the breakdown agrees with the raw trace read independently."""

import csv
import gzip
import json
import statistics

import pytest
from helpers.paths import REPO
from helpers.reports import read_csv, stage_rows
from helpers.runs import run_config

from lbm.cli import main
from lbm.simulation import simulate
from lbm.stages import STAGES

# four profiled runs (~25 s CPU) in a module fixture; the pipeline itself is covered fast by test_profiling_*. One
# xdist group: the fixture runs once, on one worker (pyproject: --dist loadfile; the group under loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("profiling_run")]

WINDOW = ["profile.enabled=true", "profile.warmup_steps=3", "profile.steps=10", "output.plots=false"]
TG = ["case=taylor_green", "grid.nx=32", "grid.ny=32", "steps=40", *WINDOW]
CYL = ["grid.nx=60", "grid.ny=36", "steps=20", "flow.reynolds=20", *WINDOW]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Profiled runs shared by the tests of this module: name -> (metrics, run_dir)."""
    out = {}
    for name, overrides in {"tg_instrumented": [*TG, "mode=instrumented"], "cyl_fused": [*CYL, "mode=fused"],
                            "cyl_xla": [*CYL, "mode=fused", "engine=xla"],
                            "cyl_sync": [*CYL, "mode=instrumented", "profile.sync=true"]}.items():
        run_dir = tmp_path_factory.mktemp(name)
        out[name] = simulate(run_config(*overrides), run_dir), run_dir
    return out


def raw_trace(run_dir):
    """The trace JSON as jax wrote it, read with gzip+json only."""
    (path,) = (run_dir / "profile").glob("plugins/profile/*/*.trace.json.gz")
    with gzip.open(path) as fh:
        return json.load(fh)["traceEvents"]


def raw_steady_stage_durations_us(run_dir):
    """Durations (µs) of the stage annotation events inside the steady-window marker, from the raw JSON."""
    events = [e for e in raw_trace(run_dir) if e.get("ph") == "X"]
    (mark,) = [e for e in events if e["name"] == "lbm.profile.steady"]
    lo, hi = mark["ts"], mark["ts"] + mark["dur"]
    out = {}
    for e in events:
        if e["name"] in STAGES and e["tid"] == mark["tid"] and lo <= e["ts"] and e["ts"] + e["dur"] <= hi:
            out.setdefault(e["name"], []).append(e["dur"])
    return out


def steady_steps(metrics):
    """Steps of the steady window: the profile window's whole chunks after the warm-up ones."""
    w = metrics["profiled_steps"]
    return w["end_step"] - w["steady_from_step"]


def raw_first_span_us(run_dir, name):
    """Duration (µs) of the first span called ``name`` on the steady marker's thread, from the raw JSON."""
    events = [e for e in raw_trace(run_dir) if e.get("ph") == "X"]
    (mark,) = [e for e in events if e["name"] == "lbm.profile.steady"]
    return min((e for e in events if e["name"] == name and e["tid"] == mark["tid"]), key=lambda e: e["ts"])


@pytest.mark.parametrize("name,active", [("tg_instrumented", {"macroscopic", "equilibrium", "collide", "stream"}),
                                         ("cyl_sync", set(STAGES))])
def test_instrumented_breakdown_matches_raw_trace(runs, name, active):
    metrics, run_dir = runs[name]
    rows = stage_rows(run_dir / "profile" / "breakdown_host.csv")  # the host clock's table
    raw = raw_steady_stage_durations_us(run_dir)
    n = steady_steps(metrics)
    assert set(raw) == active
    for stage in STAGES:
        r = rows[stage]
        if stage not in active:
            assert r["status"] == "skipped" and r["median_ms"] == "" and r["calls"] == ""
            continue
        assert r["status"] == "measured" and r["clock"] == "host"
        assert int(r["calls"]) == n == len(raw[stage])
        # host-side median and mean = the raw annotation durations' (csv keeps 6 significant digits)
        assert float(r["median_ms"]) == pytest.approx(statistics.median(raw[stage]) / 1e3, rel=1e-5)
        assert float(r["mean_ms"]) == pytest.approx(statistics.fmean(raw[stage]) / 1e3, rel=1e-5)
        assert float(r["min_ms"]) == pytest.approx(min(raw[stage]) / 1e3, rel=1e-5)
        # first call: the stage's first annotation span (its compilation inside), read from the raw trace
        assert float(r["first_call_ms"]) == pytest.approx(raw_first_span_us(run_dir, stage)["dur"] / 1e3, rel=1e-5)
    dev = stage_rows(run_dir / "profile" / "breakdown.csv")  # the headline: the device clock
    for stage in active:
        d = dev[stage]
        assert d["clock"] == "device" and float(d["mean_ms"]) > 0 and float(d["bytes_accessed"]) > 0
    for table in (rows, dev):
        assert sum(float(r["share"]) for r in table.values() if r["share"]) == pytest.approx(1.0, abs=1e-4)
        assert int(table["timestep"]["calls"]) == n
    summary = metrics["profile"]
    assert summary["window"]["steady_steps"] == n and summary["clock"] == "device"
    bd = json.loads((run_dir / "profile" / "breakdown.json").read_text())
    assert ("blocked" in bd["attribution"]["host_clock"]) == (name == "cyl_sync")
    assert bd["attribution"]["matched_executions"] == n * len(active)


def test_sync_host_spans_include_execution(runs):
    prof = runs["cyl_sync"][1] / "profile"
    host, dev = stage_rows(prof / "breakdown_host.csv"), stage_rows(prof / "breakdown.csv")
    for stage in STAGES:  # blocked spans cover dispatch and execution: never shorter than the device time
        assert float(host[stage]["median_ms"]) >= float(dev[stage]["median_ms"])


@pytest.mark.parametrize("name", ["cyl_fused", "cyl_xla"])
def test_fused_breakdown(runs, name):
    metrics, run_dir = runs[name]
    rows = stage_rows(run_dir / "profile" / "breakdown.csv")
    bd = json.loads((run_dir / "profile" / "breakdown.json").read_text())
    active = set(json.loads((run_dir / "profile" / "compile" / "compile.json").read_text())["stages"])
    n = steady_steps(metrics)
    units = [r for r in rows.values() if r["share"] != ""]
    assert units and sum(float(r["share"]) for r in units) == pytest.approx(1.0, abs=1e-4)
    covered = set()
    for r in units:
        assert int(r["calls"]) == n and r["clock"] == "device"
        covered |= set(r["contains"].split())
    assert covered == active  # every stage's time is in some row, none is invented
    assert len({r["first_call_ms"] for r in units}) > 1  # each row's own first run, not one value repeated
    alone = {r["contains"] for r in units if " " not in r["contains"]}  # stages with a kernel row of their own
    for stage in STAGES:
        status = rows[stage]["status"]
        if stage not in active:
            assert status == "skipped", stage
        else:
            assert status == ("measured" if stage in alone else "fused"), (stage, status)
        if status == "fused":
            assert rows[stage]["median_ms"] == "" and rows[stage]["calls"] == ""
    # one dispatch per chunk of the run's own length: the raw trace holds one timestep span per profiled chunk
    chunk = metrics["profiled_steps"]["chunk_steps"]
    steps = [e for e in raw_trace(run_dir) if e.get("ph") == "X" and e["name"] == "timestep"]
    assert len(steps) == metrics["profiled_steps"]["steps"] // chunk
    assert {int(e["args"]["steps"]) for e in steps} == {chunk}
    first = min(steps, key=lambda e: e["ts"])  # the host table's first call: the first chunk's span per step
    host = stage_rows(run_dir / "profile" / "breakdown_host.csv")
    assert float(host["timestep"]["first_call_ms"]) == pytest.approx(first["dur"] / chunk / 1e3, rel=1e-5)
    assert set(metrics["compile_times_s"]) == {f"fused[{chunk}]"}  # nothing compiled for the profile
    assert bd["attribution"]["matched_executions"] == n // chunk


def test_profile_directory_contents(runs):
    _, run_dir = runs["cyl_fused"]
    prof = run_dir / "profile"
    for f in ("breakdown.csv", "breakdown_host.csv", "breakdown.json", "breakdown.png", "breakdown.txt", "timeline.png",
              "kernels.csv",
              "compile/compile.json", "compile/fused_step.opt.hlo.txt", "compile/fused_step.hlo.txt",
              "compile/fused_step.jaxpr.txt", "compile/fused_step.stablehlo.mlir", "compile/fused_step.dot"):
        assert (prof / f).is_file() and (prof / f).stat().st_size > 0, f
    assert list(prof.glob("plugins/profile/*/*.xplane.pb")) and list(prof.glob("plugins/profile/*/perfetto_trace.json.gz"))
    report = json.loads((prof / "compile" / "compile.json").read_text())
    (fused,) = report["executables"]  # fused mode runs one program: the chunk
    assert fused["name"] == "fused_step"
    assert fused["flops"] > 0 and fused["bytes_accessed"] > 0 and fused["fusions"] > 0
    assert "collide" in {s for st in fused["kernels"].values() for s in st}
    assert report["graphviz_note"]
    bd = json.loads((prof / "breakdown.json").read_text())
    assert any("ui.perfetto.dev" in line for line in bd["open"]) and any("xprof" in line for line in bd["open"])
    assert bd["run"]["case"] == "cylinder" and bd["run"]["grid"] == [60, 36] and bd["files"]["compile"]


def test_instrumented_compile_report_has_one_program_per_stage(runs):
    _, run_dir = runs["cyl_sync"]
    compile_dir = run_dir / "profile" / "compile"
    report = json.loads((compile_dir / "compile.json").read_text())
    assert [e["name"] for e in report["executables"]] == report["stages"] == [s for s in STAGES if s in report["stages"]]
    for e in report["executables"]:
        assert e["stage"] == e["name"] and all(st == [e["name"]] for st in e["kernels"].values())
        assert (compile_dir / f"{e['name']}.jaxpr.txt").is_file() and (compile_dir / f"{e['name']}.dot").is_file()
    assert not (compile_dir / "fused_step.opt.hlo.txt").exists()


def test_compile_report_is_the_run_engines_program(runs):
    """The kernel-to-stage map comes from the executable the run itself ran (engine=xla: no native custom call)."""
    for name in ("cyl_fused", "cyl_xla"):
        metrics, run_dir = runs[name]
        hlo = (run_dir / "profile" / "compile" / "fused_step.opt.hlo.txt").read_text()
        assert ("custom-call(" in hlo) == (metrics["engine"] == "native"), name
        kernels = {r["kernel"] for r in read_csv(run_dir / "profile" / "kernels.csv")[1]}
        report = json.loads((run_dir / "profile" / "compile" / "compile.json").read_text())
        assert kernels <= set(report["executables"][0]["kernels"]), name  # every traced kernel is in that program
    assert runs["cyl_xla"][0]["engine"] == "xla"


def test_analyze_reproduces_the_run_breakdown(runs, tmp_path, capsys):
    _, run_dir = runs["tg_instrumented"]
    before = stage_rows(run_dir / "profile" / "breakdown_host.csv")
    before_dev = stage_rows(run_dir / "profile" / "breakdown.csv")
    assert main(["analyze", str(run_dir), "--out", str(tmp_path / "a")]) == 0
    after = stage_rows(tmp_path / "a" / "breakdown_host.csv")
    after_dev = stage_rows(tmp_path / "a" / "breakdown.csv")
    for stage in ("macroscopic", "collide", "stream"):
        assert after[stage]["median_ms"] == before[stage]["median_ms"]
        assert after_dev[stage]["median_ms"] == before_dev[stage]["median_ms"]
    # the XPlane protobuf of the same session gives the same host figures
    (xplane,) = (run_dir / "profile").glob("plugins/profile/*/*.xplane.pb")
    assert main(["analyze", str(xplane), "--out", str(tmp_path / "b")]) == 0
    via_pb = stage_rows(tmp_path / "b" / "breakdown_host.csv")
    for stage in ("macroscopic", "collide", "stream"):
        assert float(via_pb[stage]["median_ms"]) == pytest.approx(float(before[stage]["median_ms"]), rel=1e-3)
    out = capsys.readouterr().out
    assert "collide" in out and "mean ms/step" in out


def test_analyze_sql_and_multirun(runs, tmp_path, capsys):
    _, run_dir = runs["cyl_fused"]
    assert main(["analyze", str(run_dir), "--sql", "SELECT name, COUNT(*) AS n FROM slice WHERE name = 'timestep' "
                 "GROUP BY name"]) == 0
    out = capsys.readouterr().out
    (row,) = [ln for ln in out.splitlines() if "timestep" in ln]
    chunks = runs["cyl_fused"][0]["profiled_steps"]
    assert [c for c in row.replace("|", " ").replace("│", " ").split() if c.isdigit()] == [
        str(chunks["steps"] // chunks["chunk_steps"])]  # one span per profiled chunk
    sweep = tmp_path / "multirun"
    for i, (name, grid) in enumerate([("cyl_fused", [32, 32]), ("tg_instrumented", [64, 32])]):
        job = sweep / str(i)
        job.mkdir(parents=True)
        m = dict(runs[name][0], grid=grid, cells=grid[0] * grid[1])
        (job / "metrics.json").write_text(json.dumps(m))
    assert main(["analyze", str(sweep)]) == 0
    with open(sweep / "sweep.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["grid"] for r in rows] == ["32x32", "64x32"]
    assert float(rows[0]["mlups"]) > 0 and rows[1]["share_collide"] != ""
    assert (sweep / "sweep.png").stat().st_size > 0


def test_repo_untouched():
    repo = REPO
    assert not (repo / "profile").exists() and not (repo / "analysis").exists()
