"""Capture: a ``jax.profiler`` trace over a window of the run, then the breakdown and its reports.

The profiler knows the run only as data: the stage names, the programs the engine runs (their
texts, for the compile report), the compile times, a bandwidth measurement and a few words
about the run (case, grid, lattice, precision). The run loop calls, in order: ``start()`` before
anything is compiled (so the trace holds the first call and its compilation),
``chunk_limit(step, n)`` before each chunk, ``after_chunk(step, f)`` after it, and
``finish()`` at the end. The window is ``profile.warmup_steps`` steps (kept in the trace, left
out of steady-state figures) followed by ``profile.steps`` steady-state steps; the trace
stops when the window is over, the rest of the run is not traced.

In fused mode each step of the window is one dispatch (chunk of 1 step) under a
``StepTraceAnnotation("timestep")`` made here, so that every step's device events are
separate. The warm-up and steady steps are wrapped in ``lbm.profile.warmup`` and
``lbm.profile.steady`` spans so that any reader of the trace can tell them apart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from lbm.errors import LbmError
from lbm.profiling import breakdown as bdm
from lbm.profiling.pipeline import Analysis, RunFacts, analyse, relative
from lbm.profiling.tracedb import locate_trace

log = logging.getLogger("lbm")

_ACTIVE: list[Profiler] = []
_BANDWIDTH: dict[str, Mapping[str, Any]] = {}

REALIGN_MAX_SINGLE_STEPS = 64
"""After the window, at most this many single steps realign the fused loop's chunks (else one new chunk compiles)."""
PYTHON_TRACER_LEVEL = 0
"""jax.profiler's Python function tracer is off: it adds an event per Python call (20x the trace) and
inflates the host dispatch spans it is meant to show."""


def measured_bandwidth(measure: Callable[[], Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """``measure()`` (a dict with ``bandwidth_gbs``), called once per process and device; None if it fails."""
    dev = str(jax.devices()[0])
    if dev not in _BANDWIDTH:
        try:
            _BANDWIDTH[dev] = measure()
        except Exception as exc:  # out of memory on a small device, say: the roofline columns stay empty
            log.warning("profile: bandwidth measurement failed (%s); no roofline", exc)
            return None
    return _BANDWIDTH[dev]


def open_instructions(profile_dir: Path, trace_json: Path | None, perfetto_json: Path | None) -> list[str]:
    """How to open the trace in the Perfetto UI and in XProf/TensorBoard."""
    lines = []
    pf = perfetto_json or trace_json
    if pf is not None:
        lines.append(f"Perfetto UI: open https://ui.perfetto.dev, 'Open trace file', choose {pf}")
    lines.append(f"XProf: xprof --logdir {profile_dir} --port 8791 (pip install xprof), or "
                 f"tensorboard --logdir {profile_dir} (pip install tensorboard tensorboard-plugin-profile), "
                 "then the Profile tab, trace_viewer")
    lines.append(f"SQL: python -m lbm analyze {profile_dir.parent} --sql \"SELECT name, COUNT(*), SUM(dur) FROM slice "
                 "GROUP BY name ORDER BY 3 DESC LIMIT 20\"")
    return lines


class Profiler:
    """Records a jax.profiler trace over the profile window of a run and writes ``profile/``."""

    def __init__(self, out_dir: Path, settings: Mapping[str, Any], *, mode: str, steps: int, stages: Sequence[str],
                 run_info: Mapping[str, Any], programs: Callable[[], Sequence[Mapping[str, Any]]],
                 compile_times: Callable[[], Mapping[str, float]], bandwidth: Callable[[], Mapping[str, Any]],
                 compile_window: Callable[[], Any] | None = None) -> None:
        """``out_dir``: the ``profile/`` directory; ``settings``: the ``profile.*`` config (warmup_steps, steps,
        sync, backend, trace_processor); ``mode``: fused | instrumented; ``steps``: the run's steps; ``stages``: the
        case's active stages; ``run_info``: case, grid, lattice, precision (for titles and breakdown.json);
        ``programs()``: the engine's programs (see :mod:`lbm.profiling.compile_report`), read after the trace;
        ``compile_times()``: the run's compile times (s); ``bandwidth()``: a bandwidth measurement with
        ``bandwidth_gbs`` (GB/s); ``compile_window()``: compiles the one-step chunk of the fused window (in the
        trace, under a span the breakdown reads), None where the window needs no compilation of its own."""
        self.dir = Path(out_dir)
        self.cfg = dict(settings)
        self.mode = mode
        self.steps = int(steps)
        self.stages = list(stages)
        self.run_info = dict(run_info)
        self.programs = programs
        self.compile_times = compile_times
        self.bandwidth = bandwidth
        self.compile_window = compile_window
        want_w, want_s = int(self.cfg.get("warmup_steps", 5)), int(self.cfg.get("steps", 20))
        self.warmup = min(want_w, max(self.steps - 1, 0))
        self.steady = max(0, min(want_s, self.steps - self.warmup))
        if (self.warmup, self.steady) != (want_w, want_s):
            log.warning("profile: the run has %d steps; window reduced to %d warm-up + %d steady steps "
                        "(asked %d + %d)", self.steps, self.warmup, self.steady, want_w, want_s)
        self.end = self.warmup + self.steady
        self.session: Any = None
        self.running = False
        self._step_ann: Any = None
        self._mark: Any = None
        self._mark_name: str | None = None
        self.summary: dict[str, Any] = {}
        self._chunk: int | None = None

    # --- the hook -----------------------------------------------------------------------
    def start(self) -> None:
        """Start the trace (before compilation, so that the first call is in it)."""
        for stale in list(_ACTIVE):  # a run that raised mid-window left its trace running
            stale._stop_trace(quiet=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        opts = jax.profiler.ProfileOptions()
        opts.python_tracer_level = PYTHON_TRACER_LEVEL
        try:
            self.session = jax.profiler.start_trace(str(self.dir), create_perfetto_trace=True, profiler_options=opts)
        except RuntimeError as exc:
            raise LbmError(f"cannot start the profiler: {exc} (another jax.profiler trace is running in this process)") from None
        self.running = True
        _ACTIVE.append(self)
        if self.compile_window is not None and self.end:
            # The fused window runs one step per dispatch: compile that chunk now, in the trace but outside the
            # timed loop (as the run does for its own chunks), under a span that the breakdown reads.
            with jax.profiler.TraceAnnotation(bdm.COMPILE_MARK):
                self.compile_window()
        log.info("profile: tracing %d warm-up + %d steady steps (%s mode) into %s", self.warmup, self.steady,
                 self.mode, self.dir)

    def chunk_limit(self, step: int, n: int) -> int:
        """Steps of the next chunk: window boundaries respected; one step per dispatch in fused mode."""
        if self._chunk is None:
            self._chunk = n  # the loop's chunk size (its first chunk is a full one, or the whole run)
        if not self.running or step >= self.end:
            return self._realign(step, n)
        return self._window_chunk(step, n)

    def _realign(self, step: int, n: int) -> int:
        """Fused mode after the window: single (already compiled) steps until the loop's chunks line up again,
        so that no chunk of a new length is compiled inside the timed loop."""
        k = self._chunk or n
        if self.mode != "fused" or k <= 1:
            return n
        left, tail = self.steps - step, self.steps % k
        singles = [left % k] + ([(left - tail) % k] if tail and left >= tail else [])
        # Aligned: the loop's chunks (and its compiled tail) finish the run. Far from it: one new tail length compiles.
        return n if min(singles) == 0 or min(singles) > REALIGN_MAX_SINGLE_STEPS else 1

    def _window_chunk(self, step: int, n: int) -> int:
        if step == 0 and self.warmup:
            self._open_mark(bdm.WARMUP_MARK)
        if step == self.warmup:
            self._open_mark(bdm.STEADY_MARK)
        limit = self.warmup - step if step < self.warmup else self.end - step
        n = max(1, min(n, limit))
        if self.mode == "fused":
            n = 1
            self._step_ann = jax.profiler.StepTraceAnnotation(bdm.STEP, step_num=step)
            self._step_ann.__enter__()
        return n

    def after_chunk(self, step: int, f: Any) -> None:
        """Close the step annotation; at the end of the window, wait for the device and stop the trace."""
        if not self.running:
            return
        if self._step_ann is not None:
            self._step_ann.__exit__(None, None, None)
            self._step_ann = None
        if step == self.warmup and self._mark_name == bdm.WARMUP_MARK:
            self._close_mark()
        if step >= self.end:
            jax.block_until_ready(f)
            self._close_mark()
            self._stop_trace()

    def finish(self) -> dict[str, Any]:
        """Stop the trace if still running, analyse it, write the reports; a JSON-able summary for metrics.json."""
        if self.running:
            self._close_mark()
            self._stop_trace()
        try:
            return self._analyse()
        except Exception as exc:  # the simulation's results must still be written: report, do not raise
            log.error("profile: analysis failed (%s: %s); the trace is kept in %s, try python -m lbm analyze %s",
                      type(exc).__name__, exc, self.dir, self.dir.parent)
            log.debug("profile: analysis traceback", exc_info=True)
            return {"dir": "profile", "error": f"{type(exc).__name__}: {exc}"}

    # --- internals ----------------------------------------------------------------------
    def _open_mark(self, name: str) -> None:
        self._close_mark()
        self._mark = jax.profiler.TraceAnnotation(name)
        self._mark.__enter__()
        self._mark_name = name

    def _close_mark(self) -> None:
        if self._mark is not None:
            self._mark.__exit__(None, None, None)
            self._mark, self._mark_name = None, None

    def _stop_trace(self, quiet: bool = False) -> None:
        if not self.running:
            return
        self.running = False
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        try:
            jax.profiler.stop_trace()
        except RuntimeError as exc:
            if not quiet:
                raise LbmError(f"cannot stop the profiler: {exc}") from None

    def _analyse(self) -> dict[str, Any]:
        from lbm.profiling.compile_report import write_compile_report

        files = locate_trace(self.dir)
        creport = write_compile_report(self.programs(), self.stages, self.dir / "compile")
        if not creport["graphviz"]:
            log.info("profile: %s", creport["graphviz_note"])
        bw = measured_bandwidth(self.bandwidth)
        bw_gbs = bw["bandwidth_gbs"] if bw else None
        dev = jax.devices()[0]
        sync = bool(self.cfg.get("sync"))
        info = self.run_info
        title = (f"{info.get('case')} {'x'.join(map(str, info.get('grid', [])))} {info.get('lattice')} "
                 f"{info.get('precision')}, {self.mode} mode, {dev.platform}")
        how = open_instructions(self.dir, files.trace_json, files.perfetto_json)
        extra = {
            "run": {**info, "mode": self.mode, "sync": sync, "device": str(dev), "platform": dev.platform},
            "roofline": {"bandwidth_gbs": bw_gbs, "source": _bandwidth_source(bw), "detail": bw},
            "compile": {"graphviz": creport["graphviz"], "note": creport["graphviz_note"],
                        "report": "compile/compile.json"},
            "open": how,
            "files": {"compile": "compile/compile.json"},
        }
        facts = RunFacts(stages=self.stages, mode=self.mode, sync=sync, compile_report=creport,
                         compile_times_s=dict(self.compile_times()), bandwidth_gbs=bw_gbs)
        result = analyse(files, self.dir, facts, backend=self.cfg.get("backend", "auto"),
                         trace_processor=self.cfg.get("trace_processor"), title=title, extra=extra)
        log.info("profile: trace %s; queries on the %s", files.primary, result.backend_note)
        if self.cfg.get("backend") == "perfetto" and result.backend != "perfetto":
            log.warning("profile: %s", result.backend_note)
        print(result.table, end="")
        for line in how:
            log.info("profile: %s", line)
        for n in result.breakdown.notes:  # attribution gaps are warnings, explanations are information
            log.log(logging.WARNING if ("matched to" in n or "cannot" in n or "no XLA" in n) else logging.INFO,
                    "profile: %s", n)
        self.summary = summary(result, bw_gbs, self.dir)
        return self.summary


def _bandwidth_source(bw: Mapping[str, Any] | None) -> str | None:
    """Where the roofline bandwidth comes from, in words."""
    if not bw:
        return None
    return (f"measured in this process on {bw.get('device', 'the device')}: the {bw.get('roofline_kernel', 'best')} "
            f"kernel, median of {bw.get('repeats', '?')} repeats")


def summary(result: Analysis, bandwidth_gbs: float | None, profile_dir: Path) -> dict[str, Any]:
    """The JSON-able summary of a profiled run for metrics.json (``profile``)."""
    bd = result.breakdown
    return {
        "dir": "profile",
        "mode": bd.mode,
        "clock": bd.clocks["main"],
        "device_clock": bd.clocks["device"],
        "window": bd.window,
        "timestep_median_ms": {"host": bd.timestep.get("median_ms"), "device": bd.timestep.get("device_median_ms")},
        "first_step_ms": bd.timestep.get("first_call_ms"),
        "stages": {r["stage"]: {k: r.get(k) for k in ("status", "calls", "median_ms", "share", "device_median_ms",
                                                      "device_share", "gbs", "roofline_pct") if k in r}
                   for r in bd.rows if r["stage"] != bdm.STEP},
        "bandwidth_gbs": bandwidth_gbs,
        "backend": result.backend,
        "trace": relative(result.trace.primary, profile_dir),
        "files": result.written,
    }
