"""The profile of a gradient: a jax.profiler trace of value-and-gradient calls, broken down by stage and pass.

``lbm.value_and_grad(overrides + ["profile.enabled=true"], ..., profile_dir=...)`` compiles and runs
the gradient once (the value and derivatives it returns), then traces ``ceil(profile.steps / steps)``
more calls (at least one), each under a ``value_and_grad`` annotation, and writes into ``profile_dir``:
the trace (plugins/profile/<session>/, as jax.profiler writes it; Perfetto and ``python -m lbm analyze
--sql`` read it) and gradient_breakdown.csv / .json / .png: the device time of every stage in each pass
(lbm.profiling.gradient), e.g. ``collide``, ``collide (recompute)``, ``collide (backward)``. A fused
gradient's kernels get their rows from the op_name paths of the compiled program's HLO; an
instrumented one's executables from their names.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import jax

from lbm.diff.parameters import Parameterisation
from lbm.engines.timestep import active_stages
from lbm.profiling import gradient as grad_rows
from lbm.profiling import queries
from lbm.profiling.capture import PYTHON_TRACER_LEVEL
from lbm.profiling.events import CONTAINER
from lbm.profiling.tracedb import locate_trace, open_trace_db

log = logging.getLogger("lbm")

SPAN = "value_and_grad"
"""The annotation around each traced call."""


def traced_calls(fn: Any, values: dict[str, Any], calls: int, out_dir: Path) -> list[float]:
    """Run ``fn(values)`` ``calls`` times under a jax.profiler trace into ``out_dir``; each call's wall seconds."""
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = PYTHON_TRACER_LEVEL
    jax.profiler.start_trace(str(out_dir), create_perfetto_trace=True, profiler_options=opts)
    walls = []
    try:
        for k in range(calls):
            t0 = time.perf_counter()
            with jax.profiler.TraceAnnotation(SPAN, call=k):
                jax.block_until_ready(fn(values))
            walls.append(time.perf_counter() - t0)
    finally:
        jax.profiler.stop_trace()
    return walls


def profile_gradient(param: Parameterisation, fn: Any, values: dict[str, Any], out_dir: Path) -> list[dict[str, Any]]:
    """Trace calls of the gradient ``fn`` (jitted or compiled; called once before) and write the breakdown."""
    run = param.case.run
    steps = run.steps
    calls = max(1, math.ceil(run.profile.steps / steps))
    stages = active_stages(param.setup)
    instrumented = run.mode == "instrumented"
    if instrumented:
        def row_of(e: dict[str, Any]) -> str:
            return grad_rows.module_row(str(e.get("hlo_module"))) or grad_rows.UNSCOPED
    else:
        program = fn if hasattr(fn, "as_text") else fn.lower(values).compile()  # value_and_grad's: compiled
        kernels = grad_rows.kernel_rows(program.as_text(), stages)

        def row_of(e: dict[str, Any]) -> str:
            return kernels.get(str(e.get("hlo_op")), grad_rows.UNKNOWN)
    walls = traced_calls(fn, values, calls, out_dir)
    db, _ = open_trace_db(locate_trace(out_dir), run.profile.backend, run.profile.trace_processor)
    try:
        events = db.query(queries.DEVICE_EVENTS)
    finally:
        db.close()
    events = [e for e in events if not CONTAINER.match(str(e["hlo_op"])) or (  # loops enclose their kernels' events
        not instrumented and str(e["hlo_op"]) in kernels)]  # but not a small call's
    on_device = [e for e in events if str(e.get("process_name") or "").startswith("/device:")]
    rows = grad_rows.breakdown(on_device or events, row_of, stages, calls, steps)
    facts = {"case": param.case.name, "grid": "x".join(map(str, run.grid)), "steps": steps, "mode": run.mode,
             "precision": run.precision, "calls": calls, "wall_s_per_call": walls,
             "device": str(jax.devices()[0])}
    paths = grad_rows.write(rows, out_dir, facts)
    log.info("gradient profile: %s (%s)", out_dir, ", ".join(p.name for p in paths))
    return rows
