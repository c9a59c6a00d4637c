"""The one trace-to-report pipeline, as capture and analyze use it, on a synthetic trace with known figures."""

import csv
import gzip
import json
import statistics

import pytest
from helpers.profiling_raw import raw_fused_unit_ms, raw_stage_device_ms
from helpers.traces import STAGE_HOST_US, STAGE_KERNELS_US, instrumented_trace

from lbm.profiling.pipeline import NO_BANDWIDTH, RunFacts, analyse, device_events
from lbm.profiling.tracedb import locate_trace

STAGES = list(STAGE_HOST_US)
# DESIGN.md, "What profile/ holds": breakdown.csv has at least these columns (written here, not taken from lbm)
DESIGN_COLUMNS = ["stage", "calls", "first_call_ms", "median_ms", "mean_ms", "p95_ms", "total_ms", "share", "clock"]
BYTES = {"macroscopic": 4000.0, "collide": 9000.0, "stream": 6000.0}


@pytest.fixture
def trace(tmp_path):
    data, _ = instrumented_trace()
    session = tmp_path / "profile" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    (session / "host.trace.json.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    return locate_trace(tmp_path / "profile")


def facts(bandwidth):
    report = {"stages": STAGES, "executables": [
        {"name": s, "stage": s, "module": f"jit_{s}", "kernels": {f"k1_{s}": [s], f"k2_{s}": [s]},
         "bytes_accessed": BYTES[s], "compile_ms": 5.0} for s in STAGES]}
    phases = {"programs": [{"name": f"stage_{s}", "trace_ms": 1.0, "lower_ms": 2.0, "compile_ms": 30.0} for s in STAGES],
              "trace_ms": 3.0, "lower_ms": 6.0, "compile_ms": 90.0}
    return RunFacts(stages=STAGES, mode="instrumented", sync=False, compile_report=report,
                    compile_times_s={"collide": 0.25}, compile_phases=phases, bandwidth_gbs=bandwidth)


def read_table(path):
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return reader.fieldnames, list(reader)


def check_table(path, clock):
    """A breakdown CSV: DESIGN's columns, none twice; one clock; shares of the mean over the stage rows, adding to
    1; the sum row equals the stages' sum and unattributed is the step minus it."""
    header, rows = read_table(path)
    assert set(DESIGN_COLUMNS) <= set(header) and len(header) == len(set(header))
    assert {r["clock"] for r in rows} == {clock}
    timed = [r for r in rows if r["share"] != ""]
    assert timed and all(r["share_of"] == "mean_ms" for r in timed)
    total = sum(float(r["mean_ms"]) for r in timed)
    for r in timed:  # as written (12 digits), not just as computed
        assert float(r["share"]) == pytest.approx(float(r["mean_ms"]) / total, rel=1e-9)
        assert float(r["mean_ms"]) == pytest.approx(float(r["total_ms"]) / int(r["calls"]), rel=1e-9)
    assert sum(float(r["share"]) for r in timed) == pytest.approx(1.0, abs=1e-9)
    by = {r["stage"]: r for r in rows}
    assert float(by["sum of stages"]["mean_ms"]) == pytest.approx(total, rel=1e-9)
    assert float(by["unattributed"]["mean_ms"]) == pytest.approx(float(by["timestep"]["mean_ms"]) - total, rel=1e-9,
                                                                 abs=1e-12)
    return by


def test_reports_written_with_roofline(trace, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = analyse(trace, out, facts(10.0), backend="sqlite", title="synthetic", extra={"run": {"case": "x"}})
    rows = check_table(out / "breakdown.csv", "device")  # the headline: device events exist
    check_table(out / "breakdown_host.csv", "host")  # the host clock in a table of its own
    for stage, (a, b) in STAGE_KERNELS_US.items():
        device_s = (a + 1.0 + b) * 1e-6  # first kernel start to last kernel end, as built in instrumented_trace
        assert float(rows[stage]["gbs"]) == pytest.approx(BYTES[stage] / device_s / 1e9, rel=1e-5)
        assert float(rows[stage]["roofline_pct"]) == pytest.approx(10 * BYTES[stage] / device_s / 1e9, rel=1e-5)
    doc = json.loads((out / "breakdown.json").read_text())
    assert doc["run"] == {"case": "x"} and doc["roofline"] == {"bandwidth_gbs": 10.0}
    assert doc["trace"]["backend"] == "sqlite" and doc["trace"]["file"].endswith("host.trace.json.gz")
    assert doc["headline"] == "device" and doc["rows"] == doc["tables"]["device"]["rows"]
    # compile once, in its parts: trace + lower + compile + first run (the first timestep span on the host)
    comp = doc["compile"]
    first_step_ms = json.loads((out / "breakdown.json").read_text())["tables"]["host"]["rows"][-1]["first_call_ms"]
    assert (comp["trace_ms"], comp["lower_ms"], comp["compile_ms"]) == (3.0, 6.0, 90.0)
    assert comp["first_run_ms"] == pytest.approx(first_step_ms) and comp["total_ms"] == pytest.approx(99.0 + first_step_ms)
    assert not any("compile_ms" in r for r in doc["rows"])  # not repeated row by row
    assert set(result.written.values()) <= {p.name for p in out.iterdir()}
    assert {"breakdown.csv", "breakdown_host.csv", "breakdown.json", "breakdown.png", "breakdown.txt", "kernels.csv",
            "timeline.png"} == set(result.written.values())
    assert (out / "breakdown.txt").read_text() == result.table and "profile breakdown: synthetic" in result.table
    assert result.table.count("compile: ") == 1 and f"{99.0 + first_step_ms:.1f} ms = trace 3.0 ms" in result.table
    assert NO_BANDWIDTH not in result.breakdown.notes


def test_names_are_never_cut_in_the_files(trace, tmp_path):
    """A long stage-set name and a long kernel origin reach breakdown.txt/.csv/.json whole (rich would cut them with
    an ellipsis at the table's width)."""
    long = "+".join(["macroscopic", "equilibrium", "inlet", "collide", "bounce_back", "forces", "stream"] * 3)
    result = analyse(trace, tmp_path, facts(10.0), backend="sqlite", title="synthetic")
    bd = result.breakdown
    bd.tables["device"].rows[1]["stage"] = long
    bd.tables["device"].rows[1]["ops"] = "copy.4: " + "x" * 500
    from lbm.profiling.pipeline import render
    from lbm.profiling.report import render_tables, write_csv

    text = render(render_tables(bd, None, "t", fold=False))
    assert long in text and "x" * 500 in text and "…" not in text
    write_csv(tmp_path / "b.csv", bd.tables["device"])
    assert long in (tmp_path / "b.csv").read_text()
    assert "…" not in result.table and "macroscopic" in result.table


def test_without_facts_and_bandwidth(trace, tmp_path):
    result = analyse(trace, tmp_path, RunFacts(), backend="sqlite", extra={"files": {"compile": "compile.json"}})
    assert result.breakdown.mode == "instrumented"  # found from the stage spans in the trace
    assert NO_BANDWIDTH in result.breakdown.notes
    assert result.written["compile"] == "compile.json"
    assert "host.trace.json.gz (instrumented mode)" in result.table
    rows = {r["stage"]: r for r in result.breakdown.rows}
    assert rows["collide"].get("gbs") is None and rows["collide"]["calls"] == 4
    assert result.breakdown.compile["source"] == "not recorded" and result.breakdown.compile["total_ms"] is not None


def test_device_events_of_a_trace_directory(trace):
    events = device_events(trace.session_dir)
    # two kernels per stage call, 3 stages x 5 steps, plus one foreign execution; no end markers
    assert len(events) == 2 * 3 * 5 + 1 and all(e["hlo_op"] for e in events)


@pytest.mark.slow  # a profiled run each (3 s CPU; 15-30 s of wall clock at a load of 13 on 2 cores)
@pytest.mark.parametrize("mode", ["instrumented", "fused"])
def test_device_columns_of_a_real_run_equal_the_raw_trace(simulate_in, mode):
    """A profiled CPU run: the trace has no device plane; its device events are XLA:CPU thunk events on host
    threads (hlo_module, hlo_op, run_id). The breakdown's device columns equal those events read here with gzip and
    json alone (test_profiling_tracedb's raw_* readers): per stage the executions' spans (instrumented), per unit
    the kernels' durations (fused, the unit's stages from the run's compile.json), summed over the steady steps."""
    _, run_dir = simulate_in("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=12", f"mode={mode}",
                             "engine=xla", "profile.enabled=true", "profile.warmup_steps=2", "profile.steps=5",
                             "output.every=2", "output.plots=false")
    prof = run_dir / "profile"
    (path,) = prof.glob("plugins/profile/*/*.trace.json.gz")
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert not any(n.startswith("/device:") for n in names)  # CPU: thunk events on host threads only
    bd = json.loads((prof / "breakdown.json").read_text())
    report = json.loads((prof / "compile" / "compile.json").read_text())
    rows = {r["stage"]: r for r in bd["rows"]}
    if mode == "instrumented":
        for program in report["executables"]:
            stage = program["stage"]
            raw = raw_stage_device_ms(events, stage, program["module"])
            assert len(raw) == 6 == rows[stage]["calls"]  # whole chunks of 2: steps 2-8 steady
            assert rows[stage]["clock"] == "device"
            assert rows[stage]["total_ms"] == pytest.approx(sum(raw), rel=1e-6, abs=2e-6), stage
            assert rows[stage]["median_ms"] == pytest.approx(statistics.median(raw), rel=1e-6, abs=2e-6), stage
    else:
        (program,) = report["executables"]
        raw = raw_fused_unit_ms(events, program["module"], program["kernels"])
        units = {r["stage"]: r for r in bd["rows"] if r.get("share") is not None}
        assert set(units) == set(raw) and units
        for unit, ms in raw.items():
            assert units[unit]["total_ms"] == pytest.approx(ms, rel=1e-6, abs=2e-6), unit
            assert units[unit]["calls"] == 6 and units[unit]["clock"] == "device"
