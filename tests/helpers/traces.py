"""Synthetic jax.profiler traces and a small optimised HLO module, for the profiling, hlo and compile report tests."""

from __future__ import annotations

from typing import Any

from lbm.profiling.breakdown import STEADY_MARK, WARMUP_MARK

HOST, DEV = (1, 10), (1, 20)


def trace_event(where: tuple[int, int], name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    """A complete ('X') Chrome trace event on (pid, tid), times in µs as jax writes them."""
    e = {"ph": "X", "pid": where[0], "tid": where[1], "ts": ts, "dur": dur, "name": name}
    if args:
        e["args"] = args
    return e


def trace_meta() -> list[dict[str, Any]]:
    """Process and thread name events: a host CPU process with the python thread and an XLA execute thread."""
    return [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
            {"ph": "M", "pid": 1, "tid": 10, "name": "thread_name", "args": {"name": "python"}},
            {"ph": "M", "pid": 1, "tid": 20, "name": "thread_name", "args": {"name": "tf_XLAExecute/1"}}]


# Instrumented: 3 stages; step 0 is the first call (compile), steps 1..4 are steady.
STAGE_HOST_US = {"macroscopic": lambda k: 10 + k, "collide": lambda k: 20.0, "stream": lambda k: 30 + 2 * k}
STAGE_KERNELS_US = {"macroscopic": (3.0, 4.0), "collide": (5.0, 1.5), "stream": (2.0, 2.0)}
FIRST_CALL_US = {"macroscopic": 5000.0, "collide": 7000.0, "stream": 9000.0}


def instrumented_trace(module_names: bool = True) -> tuple[dict[str, Any], list[float]]:
    """Events and expected figures of a synthetic instrumented-mode trace (times in µs, as jax writes them)."""
    ev, t, run = trace_meta(), 100.0, 0
    steady = []
    for k in range(5):
        if k == 1:
            steady_start = t - 0.5
        step_start, t = t, t + 1.0
        for stage, host in STAGE_HOST_US.items():
            dur = FIRST_CALL_US[stage] if k == 0 else host(k - 1)
            ev.append(trace_event(HOST, stage, t, dur))
            run += 1
            mod = f"jit_{stage}" if module_names else "jit__lambda"
            a, b = STAGE_KERNELS_US[stage]
            s0 = t + dur + 3.0  # asynchronous: runs after the dispatch span
            ev.append(trace_event(DEV, f"k1_{stage}", s0, a, hlo_module=mod, hlo_op=f"k1_{stage}", run_id=str(run)))
            ev.append(trace_event(DEV, f"end: k1_{stage}", s0 + a, 0.1))
            ev.append(trace_event(DEV, f"k2_{stage}", s0 + a + 1.0, b, hlo_module=mod, hlo_op=f"k2_{stage}", run_id=str(run)))
            t += dur + 1.0
        ev.append(trace_event(HOST, "timestep", step_start, t - step_start + 20.0, step_num=k))
        if k >= 1:
            steady.append(t - step_start + 20.0)
        t += 100.0
    ev.append(trace_event(HOST, STEADY_MARK, steady_start, t - steady_start))
    ev.append(trace_event(HOST, WARMUP_MARK, 99.0, steady_start - 99.5))
    # a foreign execution (e.g. jnp.stack) that must not be matched to any stage
    ev.append(trace_event(DEV, "copy", t + 5.0, 1.0, hlo_module="jit_stack", hlo_op="copy", run_id="999"))
    return {"traceEvents": ev, "displayTimeUnit": "ns"}, steady


SMALL_HLO = """HloModule jit_chunk, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused_computation (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %m = f32[4]{0} multiply(%p, %p), metadata={op_name="jit(chunk)/timestep/collide/mul"}
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %f = f32[4]{0} fusion(%a), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(chunk)/timestep/stream/x"}
  ROOT %c = f32[4]{0} copy(%f)
}
"""
"""An optimised HLO module: one fusion (collide inside, stream on the call) and a copy."""
