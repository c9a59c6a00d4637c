"""Independent readers of raw jax.profiler trace events, for the profiling tests (no lbm code: gzip/json data only).

These helpers read Chrome trace events (as jax writes them: µs, 'X' events, 'M' name events) with plain Python and
implement the documented rule on their own: an execution is the events sharing (hlo_module, run_id), its device
time the first start to the last end of its events (instrumented) or the sum of its kernels (fused); the n-th
execution of a stage's module belongs to the n-th dispatch of that stage; only dispatches inside the steady-window
marker count; on a trace with device planes ('/device:*' processes) only their events are device events.
"""

STEADY_MARK = "lbm.profile.steady"
"""The steady window's span name, as documented (docs/profiling.md), written here rather than taken from lbm."""


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
    """Per unit (the '+'-joined stages of a kernel, '(unscoped)' for none): device ms summed over steady chunks; a
    loop's own thunk ('while', enclosing its kernels' events) is no kernel."""
    execs = raw_device_executions(events, module)
    out = {}
    for i in raw_steady_dispatches(events, "timestep"):
        for e in execs[i]:
            if e["args"]["hlo_op"].split(".")[0] in ("while", "conditional", "call"):
                continue
            unit = "+".join(kernel_stages[e["args"]["hlo_op"]]) or "(unscoped)"
            out[unit] = out.get(unit, 0.0) + e["dur"] / 1e3
    return out
