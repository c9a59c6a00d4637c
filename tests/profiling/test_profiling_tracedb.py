"""Synthetic traces with known slices: exact numbers on the embedded backend, the same SQL text on Perfetto's."""

import gzip
import json
import statistics

import numpy as np
import pytest
from helpers.profiling_raw import raw_fused_unit_ms, raw_stage_device_ms
from helpers.reports import breakdown_rows
from helpers.traces import DEV, FIRST_CALL_US, HOST, STAGE_HOST_US, STAGE_KERNELS_US, instrumented_trace, trace_event, trace_meta

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
    assert bd.mode == "instrumented" and bd.headline == "device" and list(bd.tables) == ["device", "host"]
    host_rows, dev_rows = breakdown_rows(bd, "host"), breakdown_rows(bd, "device")
    host_total = sum(STAGE_HOST_US[s](k) for s in STAGE_HOST_US for k in range(4))
    dev_span = {s: a + 1.0 + b for s, (a, b) in STAGE_KERNELS_US.items()}
    for stage, host in STAGE_HOST_US.items():
        r = host_rows[stage]
        vals = [host(k) for k in range(4)]
        assert r["status"] == "measured" and r["calls"] == 4 and r["clock"] == "host"
        for key, value in _expect(vals).items():
            assert r[key] == pytest.approx(value, rel=1e-12), (stage, key)
        assert r["first_call_ms"] == pytest.approx(FIRST_CALL_US[stage] / 1e3)
        # the share is the row's mean over the stages' summed means (= totals here: every stage has 4 calls)
        assert r["share"] == pytest.approx(sum(vals) / host_total, rel=1e-12) and r["share_of"] == "mean_ms"
        d = dev_rows[stage]
        assert d["calls"] == 4 and d["clock"] == "device"
        assert d["median_ms"] == pytest.approx(dev_span[stage] / 1e3, rel=1e-9)
        assert d["share"] == pytest.approx(dev_span[stage] / sum(dev_span.values()), rel=1e-9)
    for skipped in ("outflow", "equilibrium", "inlet", "bounce_back", "forces"):
        assert host_rows[skipped]["status"] == "skipped" and host_rows[skipped].get("median_ms") is None
    for clock in ("host", "device"):
        table = bd.tables[clock]
        assert sum(r["share"] for r in table.timed()) == pytest.approx(1.0, abs=1e-12)
        rows = breakdown_rows(bd, clock)
        stage_sum = sum(r["mean_ms"] for r in table.timed())
        assert rows["sum of stages"]["mean_ms"] == pytest.approx(stage_sum, rel=1e-12)
        assert rows["unattributed"]["mean_ms"] == pytest.approx(rows["timestep"]["mean_ms"] - stage_sum, rel=1e-12)
        assert [r["stage"] for r in table.rows][-3:] == ["sum of stages", "unattributed", "timestep"]
    # host step: the timestep spans; the stages' dispatch spans inside them leave 1 us gaps and 20 us at the end
    step_us = [sum(STAGE_HOST_US[s](k) + 1.0 for s in STAGE_HOST_US) + 1.0 + 20.0 for k in range(4)]
    assert host_rows["timestep"]["mean_ms"] == pytest.approx(statistics.fmean(step_us) / 1e3, rel=1e-12)
    assert host_rows["unattributed"]["mean_ms"] == pytest.approx(
        statistics.fmean(step_us) / 1e3 - host_total / 4 / 1e3, rel=1e-9)
    assert bd.window["steady_steps"] == 4
    assert bd.attribution["matched_executions"] == 12
    assert "asynchronous" in bd.tables["host"].description


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
        assert rows[stage]["calls"] == 4
        assert rows[stage]["median_ms"] == pytest.approx((a + 1.0 + b) / 1e3)
    assert bd.attribution["matched_executions"] == 12


# Fused: chunks of 4 steps, one execution each: a scan of 2 iterations (2 steps each) whose kernels carry stage sets
# from the HLO (compile report), one kernel outside the loop, and the loop's own 'while' thunk enclosing them all.
BODY_KERNELS = {"fusion.1": (["macroscopic", "equilibrium"], 6.0), "fusion.2": (["collide", "stream"], 4.0),
                "reduce.3": (["macroscopic"], 2.0), "copy.4": ([], 1.0)}
OUTSIDE_KERNELS = {"copy.5": ([], 3.0)}
FUSED_KERNELS = {**BODY_KERNELS, **OUTSIDE_KERNELS}
CHUNK, ITERATIONS = 4, 2


def fused_trace():
    """Six chunks (the first is the warm-up); in iteration i a body kernel lasts (1 + i / 2) times its base time."""
    ev, t = trace_meta(), 50.0
    for k in range(6):
        start = t + 5.0
        s = start
        run = dict(hlo_module="jit_chunk", run_id=str(100 + k))
        for op, (_, dur) in OUTSIDE_KERNELS.items():
            ev.append(trace_event(DEV, op, s, dur * (3 if k == 0 else 1), hlo_op=op, **run))
            s += dur * (3 if k == 0 else 1) + 0.5
        loop_start = s
        for i in range(ITERATIONS):
            for op, (_, dur) in BODY_KERNELS.items():
                d = dur * (1 + i / 2) * (3 if k == 0 else 1)
                ev.append(trace_event(DEV, op, s, d, hlo_op=op, **run))
                s += d + 0.5
        ev.append(trace_event(DEV, "while.1", loop_start - 0.1, s - loop_start, hlo_op="while.1", **run))
        ev.append(trace_event(HOST, "timestep", t, s - t + 10.0, step_num=k * CHUNK, steps=CHUNK))
        if k == 1:
            steady0 = t - 1.0
        t += 300.0
    ev.append(trace_event(HOST, STEADY_MARK, steady0, t - steady0))
    return {"traceEvents": ev}


def fused_info():
    return CompileInfo({"fused_step": {"name": "fused_step", "module": "jit_chunk",
                                       "kernels": {op: st for op, (st, _) in FUSED_KERNELS.items()},
                                       "unscoped": {"copy.4": "HLO copy in the loop body", "copy.5": "HLO copy"}}})


def test_fused_breakdown_attributes_scan_iterations_to_steps():
    db = SqliteTraceDB(tables_from_json(fused_trace()))
    stages = ["macroscopic", "equilibrium", "collide", "stream"]
    bd = compute(db, stages, mode="fused", compile_info=fused_info())
    assert bd.headline == "device" and bd.attribution["scan_iterations_per_chunk"] == [ITERATIONS]
    rows = breakdown_rows(bd, "device")
    steps = 5 * CHUNK
    per_iter = CHUNK // ITERATIONS

    def expect(ops):  # total over the 5 steady chunks (us); per-iteration samples per step
        body = [(1 + i / 2) * sum(BODY_KERNELS[o][1] for o in ops if o in BODY_KERNELS) for i in range(ITERATIONS)]
        out = sum(OUTSIDE_KERNELS[o][1] for o in ops if o in OUTSIDE_KERNELS)
        return 5 * (sum(body) + out), [b / per_iter + out / CHUNK for b in body] * 5

    for unit, ops in {"macroscopic": ["reduce.3"], "macroscopic+equilibrium": ["fusion.1"],
                      "collide+stream": ["fusion.2"], "(unscoped)": ["copy.4", "copy.5"]}.items():
        total, samples = expect(ops)
        r = rows[unit]
        assert r["calls"] == steps and r["total_ms"] == pytest.approx(total / 1e3, rel=1e-12), unit
        assert r["mean_ms"] == pytest.approx(total / steps / 1e3, rel=1e-12), unit
        assert r["median_ms"] == pytest.approx(statistics.median(samples) / 1e3, rel=1e-12), unit
        assert r["min_ms"] == pytest.approx(min(samples) / 1e3, rel=1e-12), unit
    assert rows["macroscopic"]["status"] == "measured" and rows["(unscoped)"]["status"] == "unscoped"
    assert rows["macroscopic+equilibrium"]["status"] == "fused-group"
    for st in ("equilibrium", "collide", "stream"):
        assert rows[st]["status"] == "fused" and rows[st].get("mean_ms") is None and "see" in rows[st]["note"]
    # the while thunk encloses the kernels: never counted; the shares add up to 1 over the timed rows
    busy = 5 * sum(sum(d * (1 + i / 2) for _, d in BODY_KERNELS.values()) for i in range(ITERATIONS)) + 5 * 3.0
    assert rows["sum of stages"]["total_ms"] == pytest.approx(busy / 1e3, rel=1e-12)
    assert sum(r["share"] for r in bd.stage_rows()) == pytest.approx(1.0, abs=1e-12)
    assert rows["collide+stream"]["share"] == pytest.approx(rows["collide+stream"]["mean_ms"]
                                                            / rows["sum of stages"]["mean_ms"], rel=1e-12)
    # the step: the chunk's device span per step; unattributed = the gaps between kernels
    span = 3.0 + 0.5 + sum(d * (1 + i / 2) + 0.5 for i in range(ITERATIONS) for _, d in BODY_KERNELS.values()) - 0.5
    assert rows["timestep"]["mean_ms"] == pytest.approx(span / CHUNK / 1e3, rel=1e-12)
    assert rows["unattributed"]["mean_ms"] == pytest.approx((span * 5 - busy) / steps / 1e3, rel=1e-9)
    # first call: the warm-up chunk, per step, row by row (not one value repeated)
    assert rows["collide+stream"]["first_call_ms"] == pytest.approx(3 * 4.0 * 2.5 / CHUNK / 1e3)
    assert rows["macroscopic"]["first_call_ms"] == pytest.approx(3 * 2.0 * 2.5 / CHUNK / 1e3)
    # the host clock has a table of its own: the chunk spans per step
    host = breakdown_rows(bd, "host")["timestep"]
    assert host["calls"] == steps and host["clock"] == "host"
    assert host["mean_ms"] == pytest.approx((5.0 + span + 0.5 + 10.0) / CHUNK / 1e3, rel=1e-12)
    assert "copy.4: HLO copy in the loop body" in rows["(unscoped)"]["ops"]
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


def test_perfetto_asked_for_without_a_binary_is_refused_and_auto_says_what_it_uses(tmp_path, monkeypatch):
    data, _ = instrumented_trace()
    f = tmp_path / "x.trace.json.gz"
    f.write_bytes(gzip.compress(json.dumps(data).encode()))
    monkeypatch.delenv("LBM_TRACE_PROCESSOR", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(LbmError, match="--backend perfetto: no trace_processor binary"):
        open_trace_db(locate_trace(f), "perfetto")
    db, note = open_trace_db(locate_trace(f), "auto")  # nothing asked for: the embedded backend, said so
    assert db.backend == "sqlite" and "embedded sqlite" in note and "trace_processor" in note
    with pytest.raises(LbmError, match="not an executable file"):
        open_trace_db(locate_trace(f), "auto", str(tmp_path / "nonexistent"))
    monkeypatch.setenv("LBM_TRACE_PROCESSOR", str(tmp_path / "missing"))
    with pytest.raises(LbmError, match="not an executable file"):
        open_trace_db(locate_trace(f), "auto")
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
        assert rows[stage]["calls"] == 4
        assert rows[stage]["median_ms"] == pytest.approx((a + 1.0 + b) / 1e3)
    assert any("no run_id" in n for n in bd.notes)


def test_no_run_id_and_shared_module_name_split_by_compile_report():
    data, _ = instrumented_trace(module_names=False)
    for e in data["traceEvents"]:
        e.get("args", {}).pop("run_id", None)
    info = CompileInfo({s: {"name": s, "module": "jit__lambda", "kernels": {f"k1_{s}": [s], f"k2_{s}": [s]}}
                        for s in STAGE_HOST_US})
    bd = compute(SqliteTraceDB(tables_from_json(data)), list(STAGE_HOST_US), compile_info=info)
    assert [r["calls"] for r in bd.rows if r["status"] == "measured"] == [4, 4, 4]


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
        assert rows[stage]["calls"] == 4
        # same starts, doubled durations: first start to last end
        assert rows[stage]["median_ms"] == pytest.approx(max(2 * a, a + 1.0 + 2 * b) / 1e3)


# --- the device columns against an independent reading of the raw trace events (tests/helpers/profiling_raw.py)


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
        assert len(raw) == 4 and rows[stage]["calls"] == 4
        assert rows[stage]["total_ms"] == pytest.approx(sum(raw), rel=1e-9, abs=1e-9)
        assert rows[stage]["median_ms"] == pytest.approx(statistics.median(raw), rel=1e-9, abs=1e-9)
        assert rows[stage]["total_ms"] != pytest.approx(sum(host), rel=1e-3)  # not the dispatch time
    total = sum(sum(raw_stage_device_ms(ev, s, f"jit_{s}")) for s in STAGE_HOST_US)
    for stage in STAGE_HOST_US:
        assert rows[stage]["share"] == pytest.approx(sum(raw_stage_device_ms(ev, stage, f"jit_{stage}")) / total)


def test_fused_device_columns_equal_an_independent_sum():
    """Fused mode: each unit's device_total_ms is the raw kernel durations summed over the steady steps."""
    data = fused_trace()
    kernel_stages = {op: st for op, (st, _) in FUSED_KERNELS.items()}
    bd = compute(SqliteTraceDB(tables_from_json(data)), ["macroscopic", "equilibrium", "collide", "stream"],
                 mode="fused", compile_info=fused_info())
    units = {r["stage"]: r for r in bd.stage_rows()}
    raw = raw_fused_unit_ms(data["traceEvents"], "jit_chunk", kernel_stages)
    assert set(units) == set(raw)
    for unit, ms in raw.items():
        assert units[unit]["total_ms"] == pytest.approx(ms, rel=1e-9), unit
