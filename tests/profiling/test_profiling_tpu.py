"""The TPU path on synthetic traces with known numbers, in both forms (trace JSON and XPlane protobuf).

A TPU says what ran on two device lines: ``XLA Modules`` (a program run: ``jit_chunk(<program id>)``, run_id) and
``XLA Ops`` (an op run, named by the op, its named scope as ``tf_op``, its ``source`` line). The program ids are
unsigned 64-bit (above SQLite's signed INTEGER), and the device clock may run ahead of the host's.
"""

from __future__ import annotations

import csv
import gzip
import json

import pytest
from helpers.reports import breakdown_rows
from helpers.tpu_trace import Ev, to_json, to_xspace

from lbm.cli import main
from lbm.errors import LbmError
from lbm.profiling.breakdown import GAP_ROW, STEP, SUM_ROW, UNSCOPED, compute, kernel_stage_map
from lbm.profiling.chunks import scan_iterations
from lbm.profiling.tracedb import SqliteTraceDB, tables_from_json, tables_from_xplane
from lbm.profiling.xplane import XPlaneError, read_xspace

PROGRAM = 17221974639109815493  # a real TPU program id: above 2**63
HOST, DEV = "/host:CPU", "/device:TPU:0"
SCOPE = "jit(chunk)/while/body/closed_call/timestep"
US = 1000  # ns


def op(name, ts_us, dur_us, tf_op=None, source=None, category="loop fusion", nbytes=4096, flops=64, program=PROGRAM):
    """An XLA Ops event: metadata stats as a TPU keeps them (tf_op, source, category, bytes, flops, program id)."""
    meta = {"hlo_category": category, "bytes_accessed": nbytes, "model_flops": flops, "program_id": program}
    if tf_op:
        meta["tf_op"] = tf_op
    if source:
        meta["source"] = source
    return Ev(DEV, "XLA Ops", f"%{name} = f32[8]{{0}} fusion(), kind=kLoop", int(ts_us * US), int(dur_us * US),
              display=name, meta=meta)


def program_run(name, ts_us, dur_us, run_id, program=PROGRAM):
    return Ev(DEV, "XLA Modules", f"{name}({program})", int(ts_us * US), int(dur_us * US), stats={"run_id": run_id})


def host(name, ts_us, dur_us, **stats):
    return Ev(HOST, "python3", name, int(ts_us * US), int(dur_us * US), stats=stats)


def chunk_ops(t0):
    """One 4-step chunk's program run at t0 (µs): a copy before the loop; 2 iterations of 2 steps, each the Pallas
    bulk kernel (10 µs), an unscoped gather (4 µs), a nested loop of 3 outflow slices (1 µs each) and the stream
    scatter (3 µs); the run ends 2 µs after its last op. Returns the events and the run's duration (µs)."""
    evs = [op("copy.1", t0 + 1, 1, category="data formatting")]
    t = t0 + 2
    loop_start = t
    for _ in range(2):
        evs.append(op("fusion.7", t, 10, f"{SCOPE}/fused_bulk+macroscopic+equilibrium+collide+stream/pallas_call:",
                      "/work/main/lbm/engines/pallas/kernels.py:179", category="custom-call"))
        evs.append(op("gather_fusion", t + 10, 4, f"{SCOPE}/gather:", "/work/main/lbm/engines/pallas/engine.py:95",
                      category="custom fusion"))
        evs.append(op("while.6", t + 14, 3, category="while"))
        evs += [op("dynamic-slice.2", t + 14 + i, 1, f"{SCOPE}/outflow/gather:") for i in range(3)]
        evs.append(op("scatter_fusion", t + 17, 3, f"{SCOPE}/stream/scatter:", category="custom fusion"))
        t += 20
    evs.append(op("while.5", loop_start, t - loop_start, category="while"))
    return evs, t + 2 - t0


def fused_trace(skew_us=-30.0):
    """Two 4-step chunks (warm-up, steady) under their host spans; the device clock ``skew_us`` off the host's (the
    steady chunk's run starts before its host span: a time-order match would miss it)."""
    evs = [host("lbm.profile.warmup", 100, 200), host("timestep", 101, 198, step_num=0, steps=4),
           host("lbm.profile.steady", 400, 200), host("timestep", 401, 198, step_num=4, steps=4),
           program_run("jit_convert_element_type", 50, 1, 1, program=10022917753759327618)]
    for i, t0 in enumerate((110, 410)):
        ops, dur = chunk_ops(t0 + skew_us * i)
        evs += [program_run("jit_chunk", t0 + skew_us * i, dur, 10 + i), *ops]
        evs += [program_run("jit__reductions", t0 + 150, 5, 20 + i, program=4067121272004105205),
                op("fusion", t0 + 151, 3, "jit(_reductions)/reduce_sum:", program=4067121272004105205)]
    return evs


def db_of(evs, form, tmp_path):
    if form == "json":
        return SqliteTraceDB(tables_from_json(to_json(evs), "synthetic"))
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(to_xspace(evs))
    return SqliteTraceDB(tables_from_xplane(path))


def test_the_xplane_reader_gives_display_names_metadata_stats_and_unsigned_ids():
    planes = read_xspace(to_xspace(fused_trace()))
    dev = next(p for p in planes if p.name == DEV)
    ops = next(line for line in dev.lines if line.name == "XLA Ops")
    bulk = next(e for e in ops.events if e.name == "fusion.7")
    assert bulk.stats["long_name"].startswith("%fusion.7 = ")  # the HLO text, as the trace JSON names it
    assert bulk.stats["tf_op"].endswith("pallas_call:") and bulk.stats["source"].endswith("kernels.py:179")
    assert bulk.stats["program_id"] == PROGRAM and bulk.duration_ns == 10 * US  # uint64, exact
    runs = next(line for line in dev.lines if line.name == "XLA Modules")
    assert runs.events[1].name == f"jit_chunk({PROGRAM})" and runs.events[1].stats["run_id"] == 10
    with pytest.raises(XPlaneError):
        read_xspace(b"not a protobuf at all")
    with pytest.raises(XPlaneError):
        read_xspace(to_xspace(fused_trace())[:-7])  # truncated


@pytest.mark.parametrize("form", ["json", "xplane"])
def test_unsigned_64_bit_values_are_kept_whole(form, tmp_path):
    # XPlane: a uint64 stat; trace JSON: an integer argument as large (jax writes them as text; a JSON number too)
    evs = fused_trace()
    data = to_json(evs)
    if form == "json":
        data["traceEvents"].append({"ph": "X", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0, "name": "big",
                                    "args": {"program_id": PROGRAM, "too_big": 2**70}})
        db = SqliteTraceDB(tables_from_json(data, "synthetic"))
    else:
        db = db_of(evs, form, tmp_path)
    got = db.query("SELECT DISTINCT int_value, string_value, value_type, display_value FROM args "
                   "WHERE key = 'args.program_id' AND display_value = '17221974639109815493'")
    if form == "json":  # the op events' text ids stay text; the JSON number is a uint
        got = [r for r in got if r["value_type"] == "uint"]
    (row,) = got
    assert row["value_type"] == "uint" and row["int_value"] < 0 and row["int_value"] % 2**64 == PROGRAM
    if form == "json":
        (big,) = db.query("SELECT value_type, string_value FROM args WHERE key = 'args.too_big'")
        assert big == {"value_type": "string", "string_value": str(2**70)}


@pytest.mark.parametrize("form", ["json", "xplane"])
def test_fused_tpu_breakdown_from_xla_ops_by_named_scope(form, tmp_path):
    bd = compute(db_of(fused_trace(), form, tmp_path), mode="fused")
    assert bd.headline == "device" and bd.attribution["device_events"].startswith("a TPU's XLA Ops")
    assert bd.attribution["matched_executions"] == 1 and bd.attribution["scan_iterations_per_chunk"] == [2]
    r = breakdown_rows(bd)
    per_step = {"macroscopic+equilibrium+collide+stream": 2 * 10 / 4, "outflow": 2 * 3 / 4, "stream": 2 * 3 / 4,
                UNSCOPED: (1 + 2 * 4) / 4}  # µs per step: the copy before the loop is spread over the 4 steps
    for unit, us in per_step.items():
        assert r[unit]["mean_ms"] == pytest.approx(us / 1e3), unit
    assert r["outflow"]["status"] == "measured" and r[UNSCOPED]["status"] == "unscoped"
    # one sample per scan iteration, divided by its 2 steps; the nested loop's 3 runs per iteration in its samples
    assert r["outflow"]["calls"] == 4 and r["outflow"]["median_ms"] == pytest.approx(3 / 2 / 1e3)
    # the step: the chunk's program run (44 µs for 4 steps), not the ops' extent; the gap is the run's idle 2+1 µs
    assert r[STEP]["mean_ms"] == pytest.approx(44 / 4 / 1e3)
    assert r[SUM_ROW]["mean_ms"] + r[GAP_ROW]["mean_ms"] == pytest.approx(r[STEP]["mean_ms"])
    assert r[GAP_ROW]["mean_ms"] == pytest.approx(3 / 4 / 1e3)
    assert sum(x["share"] for x in bd.stage_rows()) == pytest.approx(1.0)
    # the unscoped kernels named by their source line, the costliest first
    assert r[UNSCOPED]["ops"].startswith("gather_fusion: lbm/engines/pallas/engine.py:95 (scope " + SCOPE + "/gather:)")
    kern = {k["kernel"]: k for k in bd.kernels}
    assert "while.5" not in kern and "while.6" not in kern  # loops enclose their ops: no time of their own
    assert kern["fusion.7"]["category"] == "custom-call" and kern["fusion.7"]["bytes_per_call"] == 4096
    assert kern["fusion.7"]["model_flops_per_call"] == 64 and kern["fusion.7"]["program_id"] == str(PROGRAM)
    assert kern["dynamic-slice.2"]["calls"] == 6 and "fusion" not in kern  # _reductions' op: another program


def test_both_forms_give_the_same_breakdown(tmp_path, capsys):
    evs = fused_trace()
    trace_dir = tmp_path / "profile" / "plugins" / "profile" / "s"
    trace_dir.mkdir(parents=True)
    with gzip.open(trace_dir / "h.trace.json.gz", "wt") as fh:
        json.dump(to_json(evs), fh)
    (trace_dir / "h.xplane.pb").write_bytes(to_xspace(evs))
    got = {}
    for name in ("h.trace.json.gz", "h.xplane.pb"):
        assert main(["analyze", str(trace_dir / name), "--out", str(tmp_path / name)]) == 0
        got[name] = list(csv.DictReader((tmp_path / name / "breakdown.csv").open()))
        kernels = list(csv.DictReader((tmp_path / name / "kernels.csv").open()))
        assert {k["kernel"]: k["category"] for k in kernels}["gather_fusion"] == "custom fusion"
    capsys.readouterr()
    keys = ("stage", "status", "calls", "mean_ms", "median_ms", "share", "clock")
    assert [{k: r[k] for k in keys} for r in got["h.trace.json.gz"]] == [{k: r[k] for k in keys}
                                                                           for r in got["h.xplane.pb"]]


def test_a_broken_scope_mapping_changes_the_rows(tmp_path):
    # the rows follow tf_op: the same trace with the bulk kernel's scope dropped puts its time in (unscoped)
    evs = fused_trace()
    for e in evs:
        if e.display == "fusion.7":
            e.meta = {k: v for k, v in e.meta.items() if k != "tf_op"}
    r = breakdown_rows(compute(db_of(evs, "json", tmp_path), mode="fused"))
    assert "macroscopic+equilibrium+collide+stream" not in r
    assert r[UNSCOPED]["mean_ms"] == pytest.approx((1 + 2 * 4 + 2 * 10) / 4 / 1e3)


def test_the_compile_report_widens_a_fusion_to_the_stages_it_holds():
    events = [{"hlo_op": "fusion.1", "tf_op": f"{SCOPE}/macroscopic/div:"},
              {"hlo_op": "fusion.2", "tf_op": f"{SCOPE}/outflow/gather:"},
              {"hlo_op": "fusion.3", "tf_op": f"{SCOPE}/gather:"},
              {"hlo_op": "copy.4"}]
    reported = {"fusion.1": ["macroscopic", "equilibrium"], "fusion.2": [], "fusion.3": [], "copy.4": []}
    assert kernel_stage_map(reported, events) == {
        "fusion.1": ["macroscopic", "equilibrium"],  # tf_op names the root's stage; the fusion holds both
        "fusion.2": ["outflow"],  # in a loop nested in the kernel: the compile report saw no scope, the trace does
        "fusion.3": [], "copy.4": []}
    assert kernel_stage_map({}, events)["fusion.1"] == ["macroscopic"]


def test_scan_iterations_ignore_a_nested_loops_counts():
    evs = [{"hlo_op": "body", "dur": 10}] * 5 + [{"hlo_op": "inner", "dur": 1}] * 15 + [{"hlo_op": "pre", "dur": 1}]
    assert scan_iterations(evs, 10) == 5  # 15 does not divide 10 steps; 5 holds the most time
    assert scan_iterations(evs, 15) == 5  # both divide: the count holding the most device time


def instrumented_trace(skew_us=-70.0):
    """Three steps (1 warm-up, 2 steady) of three stages dispatched one jit each (100 µs host spans); each program
    run 10 µs on the device holding ops of 4 and 5 µs; the device clock ``skew_us`` off in the last step."""
    stages = ("macroscopic", "collide", "stream")
    programs = {s: 1000 + i for i, s in enumerate(stages)}
    evs = [host("lbm.profile.warmup", 0, 400), host("lbm.profile.steady", 400, 800)]
    run = 1
    for step in range(3):
        t0 = step * 400 + 10
        evs.append(host("timestep", t0, 380, step_num=step))
        for i, s in enumerate(stages):
            ts = t0 + 10 + 120 * i
            evs.append(host(s, ts, 100))
            dev = ts + 60 + (skew_us if step == 2 else 0)
            evs.append(program_run(f"jit_stage_{s}", dev, 10, run, program=programs[s]))
            evs += [op("copy.1", dev + 0.5, 4, program=programs[s], category="data formatting"),
                    op("fusion.2", dev + 5, 5, f"jit(stage_{s})/mul:", program=programs[s])]
            run += 1
    return evs


@pytest.mark.parametrize("form", ["json", "xplane"])
def test_instrumented_tpu_breakdown_sums_program_runs_and_says_the_device_idles(form, tmp_path):
    bd = compute(db_of(instrumented_trace(), form, tmp_path))
    assert bd.mode == "instrumented" and bd.headline == "device"
    assert bd.attribution["matched_executions"] == 6  # the skewed step too: matched in order, by program
    r = breakdown_rows(bd)
    for s in ("macroscopic", "collide", "stream"):
        assert r[s]["calls"] == 2 and r[s]["mean_ms"] == pytest.approx(9 / 1e3)  # the ops: 4 + 5 µs
    assert r[STEP]["mean_ms"] == pytest.approx(30 / 1e3)  # the step's three program runs, 10 µs each
    assert r[GAP_ROW]["mean_ms"] == pytest.approx(3 / 1e3)
    (idle,) = [n for n in bd.notes if n.startswith("the device idles")]
    assert "0.0300 ms of a 0.3800 ms step on the host clock (8 %" in idle and "one jit per stage" in idle
    kern = {(k["unit"], k["kernel"]): k for k in bd.kernels}
    assert kern[("collide", "copy.1")]["program_id"] == "1001" and kern[("stream", "copy.1")]["program_id"] == "1002"


def test_an_xplane_that_is_not_one_is_one_clear_error(tmp_path):
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(b"\x08\x01\x12")  # a varint field, then a length-delimited one cut short
    with pytest.raises(LbmError, match="not a readable XPlane protobuf"):
        tables_from_xplane(path)
