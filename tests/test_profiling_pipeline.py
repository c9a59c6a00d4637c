"""The one trace-to-report pipeline, as capture and analyze use it, on a synthetic trace with known figures."""

import csv
import gzip
import json

import pytest
from conftest import STAGE_HOST_US, STAGE_KERNELS_US, instrumented_trace

from lbm.profiling.breakdown import CSV_COLUMNS
from lbm.profiling.pipeline import NO_BANDWIDTH, RunFacts, analyse, device_events
from lbm.profiling.tracedb import locate_trace

STAGES = list(STAGE_HOST_US)
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
    return RunFacts(stages=STAGES, mode="instrumented", sync=False, compile_report=report,
                    compile_times_s={"collide": 0.25}, bandwidth_gbs=bandwidth)


def test_reports_written_with_roofline(trace, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = analyse(trace, out, facts(10.0), backend="sqlite", title="synthetic", extra={"run": {"case": "x"}})
    with open(out / "breakdown.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == CSV_COLUMNS
        rows = {r["stage"]: r for r in reader}
    for stage, (a, b) in STAGE_KERNELS_US.items():
        device_s = (a + 1.0 + b) * 1e-6  # first kernel start to last kernel end, as built in instrumented_trace
        assert float(rows[stage]["gbs"]) == pytest.approx(BYTES[stage] / device_s / 1e9, rel=1e-5)
        assert float(rows[stage]["roofline_pct"]) == pytest.approx(10 * BYTES[stage] / device_s / 1e9, rel=1e-5)
    # the run's own compile time wins over the compile report's
    assert float(rows["collide"]["compile_ms"]) == 250.0 and float(rows["stream"]["compile_ms"]) == 5.0
    doc = json.loads((out / "breakdown.json").read_text())
    assert doc["run"] == {"case": "x"} and doc["roofline"] == {"bandwidth_gbs": 10.0}
    assert doc["trace"]["backend"] == "sqlite" and doc["trace"]["file"].endswith("host.trace.json.gz")
    assert set(result.written.values()) <= {p.name for p in out.iterdir()}
    assert {"breakdown.csv", "breakdown.json", "breakdown.png", "breakdown.txt", "kernels.csv", "timeline.png"} \
        == set(result.written.values())
    assert (out / "breakdown.txt").read_text() == result.table and "profile breakdown: synthetic" in result.table
    assert NO_BANDWIDTH not in result.breakdown.notes


def test_without_facts_and_bandwidth(trace, tmp_path):
    result = analyse(trace, tmp_path, RunFacts(), backend="sqlite", extra={"files": {"compile": "compile.json"}})
    assert result.breakdown.mode == "instrumented"  # found from the stage spans in the trace
    assert NO_BANDWIDTH in result.breakdown.notes
    assert result.written["compile"] == "compile.json"
    assert "host.trace.json.gz (instrumented mode)" in result.table
    rows = {r["stage"]: r for r in result.breakdown.rows}
    assert rows["collide"].get("gbs") is None and rows["collide"]["calls"] == 4


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
    from test_profiling_tracedb import raw_fused_unit_ms, raw_stage_device_ms

    _, run_dir = simulate_in("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=10", f"mode={mode}",
                             "engine=xla", "profile.enabled=true", "profile.warmup_steps=2", "profile.steps=5",
                             "output.plots=false")
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
            assert len(raw) == 5 == rows[stage]["device_calls"]
            assert rows[stage]["device_total_ms"] == pytest.approx(sum(raw), rel=1e-6, abs=2e-6), stage
            assert rows[stage]["device_median_ms"] == pytest.approx(sorted(raw)[2], rel=1e-6, abs=2e-6), stage
    else:
        (program,) = report["executables"]
        raw = raw_fused_unit_ms(events, program["module"], program["kernels"])
        units = {r["stage"]: r for r in bd["rows"] if r.get("share") is not None}
        assert set(units) == set(raw) and units
        for unit, ms in raw.items():
            assert units[unit]["device_total_ms"] == pytest.approx(ms, rel=1e-6, abs=2e-6), unit
            assert units[unit]["calls"] == 5
