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
