"""Synthetic traces with known slices: exact numbers on the embedded backend, the same SQL text on Perfetto's."""

import gzip
import json
import statistics

import numpy as np
import pytest
from conftest import DEV, FIRST_CALL_US, HOST, STAGE_HOST_US, STAGE_KERNELS_US, instrumented_trace, trace_event, trace_meta

from lbm.errors import LbmError
from lbm.profiling import queries
from lbm.profiling.breakdown import STEADY_MARK, WARMUP_MARK, CompileInfo, compute
from lbm.profiling.tracedb import (
    PerfettoTraceDB,
    SqliteTraceDB,
    locate_trace,
    open_trace_db,
    read_trace_json,
    tables_from_json,
)


@pytest.fixture
def inst_db():
    data, _ = instrumented_trace()
    return SqliteTraceDB(tables_from_json(data, "synthetic"))


def test_tables_follow_perfetto_schema(inst_db):
    threads = inst_db.query(queries.THREADS)
    assert {t["thread_name"] for t in threads} == {"python", "tf_XLAExecute/1"}
    assert {t["process_name"] for t in threads} == {"/host:CPU"}
    # nesting: stage spans are children (depth 1) of the timestep spans, which sit in the steady marker
    rows = inst_db.query("SELECT s.name, s.depth, p.name AS parent FROM slice s LEFT JOIN slice p ON s.parent_id = p.id "
                         "WHERE s.name IN ('collide', 'timestep', 'lbm.profile.steady')")
    by = {(r["name"], r["parent"]) for r in rows}
    assert ("collide", "timestep") in by and ("timestep", STEADY_MARK) in by
    assert ("timestep", WARMUP_MARK) in by  # step 0 sits in the warm-up marker
    # µs -> integer ns, args readable through EXTRACT_ARG and the args table
    r = inst_db.query("SELECT ts, dur, EXTRACT_ARG(arg_set_id, 'args.hlo_op') AS op FROM slice WHERE name = 'k2_collide' "
                      "ORDER BY ts LIMIT 1")[0]
    assert isinstance(r["ts"], int) and r["dur"] == 1500 and r["op"] == "k2_collide"
    keys = {x["key"] for x in inst_db.query("SELECT DISTINCT key FROM args")}
    assert {"args.hlo_op", "args.hlo_module", "args.run_id", "args.step_num"} <= keys


def test_slice_stats_exact(inst_db):
    stats = {r["name"]: r for r in inst_db.query(queries.slice_stats(["macroscopic", "stream"]))}
    assert stats["macroscopic"]["calls"] == 5
    assert stats["macroscopic"]["total_ns"] == (5000 + 10 + 11 + 12 + 13) * 1000
    assert stats["stream"]["max_ns"] == 9000 * 1000 and stats["stream"]["min_ns"] == 30 * 1000


def _expect(vals_us):
    v = np.array(vals_us) * 1000.0
    return {"median_ms": statistics.median(v) / 1e6, "mean_ms": v.mean() / 1e6, "p95_ms": np.percentile(v, 95) / 1e6,
            "min_ms": v.min() / 1e6, "total_ms": v.sum() / 1e6}


def test_instrumented_breakdown_exact(inst_db):
    bd = compute(inst_db, ["macroscopic", "collide", "stream"])
    rows = {r["stage"]: r for r in bd.rows}
    assert bd.mode == "instrumented"
    host_total = sum(STAGE_HOST_US[s](k) for s in STAGE_HOST_US for k in range(4))
    dev_span = {s: a + 1.0 + b for s, (a, b) in STAGE_KERNELS_US.items()}
    for stage, host in STAGE_HOST_US.items():
        r = rows[stage]
        vals = [host(k) for k in range(4)]
        assert r["status"] == "measured" and r["calls"] == 4
        for key, value in _expect(vals).items():
            assert r[key] == pytest.approx(value, rel=1e-12), (stage, key)
        assert r["first_call_ms"] == pytest.approx(FIRST_CALL_US[stage] / 1e3)
        assert r["share"] == pytest.approx(sum(vals) / host_total, rel=1e-12)
        assert r["device_calls"] == 4
        assert r["device_median_ms"] == pytest.approx(dev_span[stage] / 1e3, rel=1e-9)
        assert r["device_share"] == pytest.approx(dev_span[stage] / sum(dev_span.values()), rel=1e-9)
    for skipped in ("outflow", "equilibrium", "inlet", "bounce_back", "forces"):
        assert rows[skipped]["status"] == "skipped" and rows[skipped].get("median_ms") is None
    assert sum(r["share"] for r in bd.stage_rows()) == pytest.approx(1.0, abs=1e-12)
    assert bd.window["steady_steps"] == 4
    assert bd.attribution["matched_executions"] == 12
    assert "asynchronous" in rows["collide"]["clock"]


def test_steady_window_without_marker_skips_warmup():
    data, _ = instrumented_trace()
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("name") not in (STEADY_MARK, WARMUP_MARK)]
    db = SqliteTraceDB(tables_from_json(data))
    assert compute(db, None, warmup=2).window["steady_steps"] == 3
    bd = compute(db, None)  # default: the first timestep (compilation) is left out
    assert bd.window["steady_steps"] == 4 and "no 'lbm.profile.steady' marker" in bd.window["selection"]
    assert [r["stage"] for r in bd.rows if r["status"] == "measured"] == ["macroscopic", "collide", "stream"]


def test_same_module_names_need_the_compile_report():
    data, _ = instrumented_trace(module_names=False)
    db = SqliteTraceDB(tables_from_json(data))
    info = CompileInfo({s: {"name": s, "module": "jit__lambda", "kernels": {f"k1_{s}": [s], f"k2_{s}": [s]}}
                        for s in STAGE_HOST_US})
    bd = compute(db, list(STAGE_HOST_US), compile_info=info)
    rows = {r["stage"]: r for r in bd.rows}
    for stage, (a, b) in STAGE_KERNELS_US.items():
        assert rows[stage]["device_calls"] == 4
        assert rows[stage]["device_median_ms"] == pytest.approx((a + 1.0 + b) / 1e3)
    assert bd.attribution["matched_executions"] == 12


# Fused: one executable per step; kernels carry stage sets from the HLO (compile report).
FUSED_KERNELS = {"fusion.1": (["macroscopic", "equilibrium"], 6.0), "fusion.2": (["collide", "stream"], 4.0),
                 "reduce.3": (["macroscopic"], 2.0), "copy.4": ([], 1.0)}


def fused_trace():
    ev, t = trace_meta(), 50.0
    compile_ev = trace_event(HOST, "lbm.profile.compile", 1.0, 40.0)
    ev.append(compile_ev)
    for k in range(6):
        ev.append(trace_event(HOST, "timestep", t, 200.0 if k == 0 else 50.0 + k, step_num=k))
        s = t + 5.0
        for op, (_, dur) in FUSED_KERNELS.items():
            d = dur * (3 if k == 0 else 1)
            ev.append(trace_event(DEV, op, s, d, hlo_module="jit_chunk", hlo_op=op, run_id=str(100 + k)))
            s += d + 0.5
        if k == 1:
            steady0 = t - 1.0
        t += 300.0
    ev.append(trace_event(HOST, STEADY_MARK, steady0, t - steady0))
    return {"traceEvents": ev}


def test_fused_breakdown_reports_kernels_and_stage_sets():
    db = SqliteTraceDB(tables_from_json(fused_trace()))
    info = CompileInfo({"fused_step": {"name": "fused_step", "module": "jit_chunk",
                                       "kernels": {op: st for op, (st, _) in FUSED_KERNELS.items()}}})
    stages = ["macroscopic", "equilibrium", "collide", "stream"]
    bd = compute(db, stages, mode="fused", compile_info=info)
    rows = {r["stage"]: r for r in bd.rows}
    busy = sum(d for _, d in FUSED_KERNELS.values())
    # a stage with a kernel of its own gets that kernel's time; fused sets get theirs; nothing is split
    assert rows["macroscopic"]["status"] == "measured" and rows["macroscopic"]["median_ms"] == pytest.approx(0.002)
    assert rows["macroscopic+equilibrium"]["status"] == "fused-group"
    assert rows["macroscopic+equilibrium"]["median_ms"] == pytest.approx(0.006)
    assert rows["collide+stream"]["median_ms"] == pytest.approx(0.004)
    assert rows["(unscoped)"]["median_ms"] == pytest.approx(0.001)
    for st in ("equilibrium", "collide", "stream"):
        assert rows[st]["status"] == "fused" and rows[st].get("median_ms") is None and rows[st]["calls"] == 5
    for r in bd.stage_rows():
        assert r["calls"] == 5
    assert sum(r["share"] for r in bd.stage_rows()) == pytest.approx(1.0, abs=1e-12)
    assert rows["collide+stream"]["share"] == pytest.approx(4.0 / busy)
    step = rows["timestep"]
    assert step["calls"] == 5 and step["median_ms"] == pytest.approx(0.053)
    assert step["first_call_ms"] == pytest.approx(0.040 + 0.200)  # AOT compile span + first step span
    # a fused row cannot run alone: its first call is the step's; its kernels' first run is reported beside
    assert rows["collide+stream"]["first_call_ms"] == pytest.approx(0.240)
    assert rows["collide+stream"]["first_run_device_ms"] == pytest.approx(0.012)
    assert rows["collide"]["first_call_ms"] == pytest.approx(0.240)
    assert bd.timestep["device_median_ms"] == pytest.approx((busy + 1.5) / 1e3)
    assert {k["kernel"] for k in bd.kernels} == set(FUSED_KERNELS)


class FakeTraceProcessor:
    """Stands in for perfetto's TraceProcessor: records the SQL and answers from an embedded database."""

    def __init__(self, db):
        self.db, self.seen = db, []

    def query(self, sql):
        self.seen.append(sql)
        rows = self.db.query(sql)
        cols = list(rows[0]) if rows else []

        class Result:
            column_names = cols

            def __iter__(self):
                for r in rows:
                    yield type("Row", (), dict(r))()

        return Result()


def test_both_backends_get_the_same_sql_text():
    data, _ = instrumented_trace()
    lite = SqliteTraceDB(tables_from_json(data))
    fake = FakeTraceProcessor(SqliteTraceDB(tables_from_json(data)))
    bd_lite = compute(lite, list(STAGE_HOST_US))
    bd_perf = compute(PerfettoTraceDB(fake), list(STAGE_HOST_US))
    assert fake.seen == lite.queries and len(lite.queries) >= 2
    assert queries.DEVICE_EVENTS in fake.seen
    assert bd_perf.rows == bd_lite.rows


def test_perfetto_unavailable_falls_back_and_says_so(tmp_path, monkeypatch):
    data, _ = instrumented_trace()
    f = tmp_path / "x.trace.json.gz"
    f.write_bytes(gzip.compress(json.dumps(data).encode()))
    monkeypatch.delenv("LBM_TRACE_PROCESSOR", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    db, note = open_trace_db(locate_trace(f), "perfetto")
    assert db.backend == "sqlite" and "unavailable" in note and "trace_processor" in note
    monkeypatch.setenv("LBM_TRACE_PROCESSOR", str(tmp_path / "missing"))
    db, note = open_trace_db(locate_trace(f), "auto")
    assert db.backend == "sqlite" and "not an executable file" in note
    # with a binary, the perfetto backend is used (here a fake one, never a download)
    exe = tmp_path / "trace_processor"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("LBM_TRACE_PROCESSOR", str(exe))
    monkeypatch.setattr("lbm.profiling.tracedb.open_perfetto", lambda path, binary: FakeTraceProcessor(
        SqliteTraceDB(tables_from_json(data))))
    db, note = open_trace_db(locate_trace(f), "auto")
    assert db.backend == "perfetto" and str(exe) in note
    assert compute(db, list(STAGE_HOST_US)).rows[1]["calls"] == 4


# mtime=0 and explicit ids: gzip's header carries the time, and pytest-xdist workers must collect the same ids
@pytest.mark.parametrize("content,message", [
    (b"", "empty"),
    (gzip.compress(b'{"traceEvents": [{"ph": "X"', mtime=0)[:-8], "truncated"),
    (gzip.compress(b'{"traceEvents": [{"ph": "X"', mtime=0), "truncated"),
    (gzip.compress(b'{"hello": "world"}', mtime=0), "no traceEvents"),
    (b"\x89PNG\r\n\x1a\n", "not a gzip"),
], ids=["empty", "cut-inside-gzip", "cut-inside-json", "no-trace-events", "png"])
def test_bad_trace_files_give_one_clear_error(tmp_path, content, message):
    f = tmp_path / "bad.trace.json.gz"
    f.write_bytes(content)
    with pytest.raises(LbmError, match=message):
        read_trace_json(f)


def test_device_events_without_run_id_are_grouped_by_repetition():
    data, _ = instrumented_trace()
    for e in data["traceEvents"]:
        e.get("args", {}).pop("run_id", None)
    bd = compute(SqliteTraceDB(tables_from_json(data)), list(STAGE_HOST_US))
    rows = {r["stage"]: r for r in bd.rows}
    for stage, (a, b) in STAGE_KERNELS_US.items():
        assert rows[stage]["device_calls"] == 4
        assert rows[stage]["device_median_ms"] == pytest.approx((a + 1.0 + b) / 1e3)
    assert any("no run_id" in n for n in bd.notes)


def test_no_run_id_and_shared_module_name_split_by_compile_report():
    data, _ = instrumented_trace(module_names=False)
    for e in data["traceEvents"]:
        e.get("args", {}).pop("run_id", None)
    info = CompileInfo({s: {"name": s, "module": "jit__lambda", "kernels": {f"k1_{s}": [s], f"k2_{s}": [s]}}
                        for s in STAGE_HOST_US})
    bd = compute(SqliteTraceDB(tables_from_json(data)), list(STAGE_HOST_US), compile_info=info)
    assert [r["device_calls"] for r in bd.rows if r["status"] == "measured"] == [4, 4, 4]


def test_sql_literals_are_quoted():
    assert queries.sql_literal("it's") == "'it''s'"
    assert queries.name_list([]) == "NULL"
    db = SqliteTraceDB(tables_from_json({"traceEvents": [trace_event(HOST, "it's", 1.0, 2.0)]}))
    assert db.query(queries.slice_stats(["it's"]))[0]["calls"] == 1
    with pytest.raises(LbmError, match="SQL error"):
        db.query("SELECT nope FROM slice")


def test_device_plane_events_win_over_host_launch_events():
    data, _ = instrumented_trace()
    ev = data["traceEvents"]
    ev.append({"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:GPU:0"}})
    ev.append({"ph": "M", "pid": 2, "tid": 7, "name": "thread_name", "args": {"name": "Stream #7"}})
    for e in list(ev):
        if e.get("tid") == DEV[1] and "hlo_op" in e.get("args", {}):
            # the kernels on the device plane start 2 µs after their host-side launch events (which stay)
            ev.append(dict(e, pid=2, tid=7, ts=e["ts"] + 2.0, dur=e["dur"] * 2))
    bd = compute(SqliteTraceDB(tables_from_json(data)), list(STAGE_HOST_US))
    rows = {r["stage"]: r for r in bd.rows}
    for stage, (a, b) in STAGE_KERNELS_US.items():
        assert rows[stage]["device_calls"] == 4
        # same starts, doubled durations: first start to last end
        assert rows[stage]["device_median_ms"] == pytest.approx(max(2 * a, a + 1.0 + 2 * b) / 1e3)


# --- the device columns against an independent reading of the raw trace events -----------------------------------
# These helpers read Chrome trace events (as jax writes them: µs, 'X' events, 'M' name events) with plain Python and
# implement the documented rule on their own: an execution is the events sharing (hlo_module, run_id), its device
# time the first start to the last end of its events (instrumented) or the sum of its kernels (fused); the n-th
# execution of a stage's module belongs to the n-th dispatch of that stage; only dispatches inside the steady-window
# marker count; on a trace with device planes ('/device:*' processes) only their events are device events.


def raw_device_executions(events, module):
    """Executions of ``module`` in start order: lists of the events sharing a run_id (device planes preferred)."""
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    device_pids = {pid for pid, name in names.items() if name.startswith("/device:")}
    groups = {}
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") != "X" or args.get("hlo_module") != module or "hlo_op" not in args:
            continue
        if device_pids and e["pid"] not in device_pids:
            continue
        groups.setdefault(args["run_id"], []).append(e)
    return sorted(groups.values(), key=lambda g: min(e["ts"] for e in g))


def raw_steady_dispatches(events, name):
    """Positions (in time order) of the host spans called ``name`` that lie inside the steady-window marker."""
    (mark,) = [e for e in events if e.get("ph") == "X" and e["name"] == STEADY_MARK]
    spans = sorted((e for e in events if e.get("ph") == "X" and e["name"] == name and e["tid"] == mark["tid"]),
                   key=lambda e: e["ts"])
    return [i for i, e in enumerate(spans) if mark["ts"] <= e["ts"] and e["ts"] + e["dur"] <= mark["ts"] + mark["dur"]]


def raw_stage_device_ms(events, stage, module):
    """Device span (ms) of each steady call of an instrumented stage, from the raw events."""
    execs = raw_device_executions(events, module)
    return [(max(e["ts"] + e["dur"] for e in execs[i]) - min(e["ts"] for e in execs[i])) / 1e3
            for i in raw_steady_dispatches(events, stage)]


def raw_fused_unit_ms(events, module, kernel_stages):
    """Per unit (the '+'-joined stages of a kernel, '(unscoped)' for none): device ms summed over steady steps."""
    execs = raw_device_executions(events, module)
    out = {}
    for i in raw_steady_dispatches(events, "timestep"):
        for e in execs[i]:
            unit = "+".join(kernel_stages[e["args"]["hlo_op"]]) or "(unscoped)"
            out[unit] = out.get(unit, 0.0) + e["dur"] / 1e3
    return out


def test_device_columns_equal_an_independent_sum_on_a_gpu_structured_trace():
    """Kernels on a '/device:GPU:0' plane (and their host-side launch events, which must not count): every stage's
    device_total_ms, device_median_ms and device_calls equal the raw events' figures computed here."""
    data, _ = instrumented_trace()
    ev = data["traceEvents"]
    ev.append({"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:GPU:0"}})
    ev.append({"ph": "M", "pid": 2, "tid": 7, "name": "thread_name", "args": {"name": "Stream #7"}})
    for n, e in enumerate(list(ev)):
        if e.get("tid") == DEV[1] and "hlo_op" in e.get("args", {}):
            # on the device: later than the launch, durations that differ from call to call
            ev.append(dict(e, pid=2, tid=7, ts=e["ts"] + 2.5, dur=e["dur"] * (1.5 + 0.25 * (n % 5))))
    bd = compute(SqliteTraceDB(tables_from_json(data)), list(STAGE_HOST_US))
    rows = {r["stage"]: r for r in bd.rows}
    for stage in STAGE_HOST_US:
        raw = raw_stage_device_ms(ev, stage, f"jit_{stage}")
        host = [e["dur"] / 1e3 for e in ev if e.get("name") == stage][1:]  # the steady dispatch spans
        assert len(raw) == 4 and rows[stage]["device_calls"] == 4
        assert rows[stage]["device_total_ms"] == pytest.approx(sum(raw), rel=1e-9, abs=1e-9)
        assert rows[stage]["device_median_ms"] == pytest.approx(statistics.median(raw), rel=1e-9, abs=1e-9)
        assert rows[stage]["device_total_ms"] != pytest.approx(sum(host), rel=1e-3)  # not the dispatch time
    total = sum(sum(raw_stage_device_ms(ev, s, f"jit_{s}")) for s in STAGE_HOST_US)
    for stage in STAGE_HOST_US:
        assert rows[stage]["device_share"] == pytest.approx(sum(raw_stage_device_ms(ev, stage, f"jit_{stage}")) / total)


def test_fused_device_columns_equal_an_independent_sum():
    """Fused mode: each unit's device_total_ms is the raw kernel durations summed over the steady steps."""
    data = fused_trace()
    kernel_stages = {op: st for op, (st, _) in FUSED_KERNELS.items()}
    info = CompileInfo({"fused_step": {"name": "fused_step", "module": "jit_chunk", "kernels": kernel_stages}})
    bd = compute(SqliteTraceDB(tables_from_json(data)), ["macroscopic", "equilibrium", "collide", "stream"],
                 mode="fused", compile_info=info)
    units = {r["stage"]: r for r in bd.stage_rows()}
    raw = raw_fused_unit_ms(data["traceEvents"], "jit_chunk", kernel_stages)
    assert set(units) == set(raw)
    for unit, ms in raw.items():
        assert units[unit]["device_total_ms"] == pytest.approx(ms, rel=1e-9), unit
