"""Capture: a ``jax.profiler`` trace over a window of the run, then the breakdown and its reports.

The profiler knows the run only as data: the stage names, the programs the engine runs (their
texts, for the compile report), the compile times, a bandwidth measurement and a few words
about the run (case, grid, lattice, precision). The run loop calls, in order: ``start()`` before
anything is compiled (so the trace holds the compilation), ``chunk_limit(step, n, t_run)`` before
each chunk, ``after_chunk(step, f, t_run)`` after it, and ``finish()`` at the end.

The profiler never changes the run: the chunks are the run's own (so the run observes, checks and
reports the same steps as unprofiled). The window is whole chunks: the first ones up to
``profile.warmup_steps`` steps (at least one chunk: the first run of the compiled program), then
up to ``profile.steps`` steady-state steps; the trace stops after them. In fused mode each chunk
runs under a ``StepTraceAnnotation("timestep", steps=n)``; in instrumented mode the engine
annotates every step itself. The warm-up and steady chunks sit inside ``lbm.profile.warmup`` and
``lbm.profile.steady`` spans. ``window`` records which steps were profiled and the loop time they
took, so that the run's throughput can leave them out.
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

PYTHON_TRACER_LEVEL = 0
"""jax.profiler's Python function tracer is off: it adds an event per Python call (20x the trace) and
inflates the host dispatch spans it is meant to show."""
COMPILE_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace_ms",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_ms",
                  "/jax/core/compile/backend_compile_duration": "compile_ms"}
"""jax.monitoring's duration events of a compilation, by part."""


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


class CompilePhases:
    """jax.monitoring's durations of each compilation (trace, lower, compile) while it listens, per program."""

    def __init__(self) -> None:
        self.programs: dict[str, dict[str, float]] = {}
        self.listening = False
        jax.monitoring.register_event_duration_secs_listener(self._event)

    def _event(self, event: str, duration_secs: float, **kwargs: Any) -> None:
        part = COMPILE_EVENTS.get(event)
        if not self.listening or part is None:
            return
        name = str(kwargs.get("fun_name", "?"))
        name = name[4:-1] if name.startswith("jit(") and name.endswith(")") else name
        rec = self.programs.setdefault(name, {})
        rec[part] = rec.get(part, 0.0) + duration_secs * 1e3

    def record(self) -> dict[str, Any]:
        """Per program and summed over programs (ms)."""
        progs = [{"name": n, **v} for n, v in self.programs.items()]
        return {"programs": progs, **{p: sum(v.get(p, 0.0) for v in self.programs.values())
                                      for p in COMPILE_EVENTS.values()}}


_PHASES: list[CompilePhases] = []


def compile_phases() -> CompilePhases:
    """The process's one listener (jax.monitoring listeners cannot be removed one by one)."""
    if not _PHASES:
        _PHASES.append(CompilePhases())
    return _PHASES[0]


class Profiler:
    """Records a jax.profiler trace over whole chunks of a run and writes ``profile/``."""

    def __init__(self, out_dir: Path, settings: Mapping[str, Any], *, mode: str, steps: int, stages: Sequence[str],
                 run_info: Mapping[str, Any], programs: Callable[[int], Sequence[Mapping[str, Any]]],
                 compile_times: Callable[[], Mapping[str, float]], bandwidth: Callable[[], Mapping[str, Any]]) -> None:
        """``out_dir``: the ``profile/`` directory; ``settings``: the validated ``profile.*`` section (warmup_steps,
        steps, sync, backend, trace_processor; every key present: the defaults are the config's); ``mode``: fused |
        instrumented; ``steps``: the run's steps; ``stages``: the case's active stages; ``run_info``: case, grid,
        lattice, precision (for titles and breakdown.json);
        ``programs(n)``: the engine's programs for chunks of n steps (see :mod:`lbm.profiling.compile_report`), read
        after the trace; ``compile_times()``: the run's compile times (s); ``bandwidth()``: a bandwidth measurement
        with ``bandwidth_gbs`` (GB/s)."""
        self.dir = Path(out_dir)
        self.cfg = dict(settings)
        self.mode = mode
        self.steps = int(steps)
        self.stages = list(stages)
        self.run_info = dict(run_info)
        self.programs = programs
        self.compile_times = compile_times
        self.bandwidth = bandwidth
        self.want_warmup, self.want_steady = int(self.cfg["warmup_steps"]), int(self.cfg["steps"])
        self.session: Any = None
        self.running = False
        self.done = False
        self._step_ann: Any = None
        self._mark: Any = None
        self._mark_name: str | None = None
        self.summary: dict[str, Any] = {}
        self._chunk: int | None = None
        self._first: int | None = None
        self._steady_from: int | None = None
        self._t_start = 0.0
        self.window: dict[str, Any] | None = None
        """Steps profiled (first, end, steps) and the loop seconds they took, once the window is over."""

    # --- the hook -----------------------------------------------------------------------
    def start(self) -> None:
        """Start the trace (before compilation, so that the compilation is in it)."""
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
        phases = compile_phases()
        phases.programs = {}
        phases.listening = True
        log.info("profile: tracing whole chunks of the run, about %d warm-up + %d steady steps (%s mode), into %s",
                 self.want_warmup, self.want_steady, self.mode, self.dir)

    def chunk_limit(self, step: int, n: int, t_run: float = 0.0) -> int:
        """The next chunk's steps: always ``n`` (the run's own chunk); opens the window's marks at chunk starts."""
        compile_phases().listening = False  # the run's programs are compiled before its first chunk
        if not self.running:
            return n
        if self._first is None:
            self._first, self._chunk, self._t_start = step, n, t_run
            self._open_mark(bdm.WARMUP_MARK)
        elif self._steady_from is None and step - self._first >= max(1, self.want_warmup):
            self._steady_from = step
            self._open_mark(bdm.STEADY_MARK)
        if self.mode == "fused":
            self._step_ann = jax.profiler.StepTraceAnnotation(bdm.STEP, step_num=step, steps=n)
            self._step_ann.__enter__()
        return n

    def after_chunk(self, step: int, f: Any, t_run: float = 0.0) -> None:
        """Close the chunk's annotation; once the steady chunks hold enough steps, wait for the device and stop."""
        if not self.running:
            return
        if self._step_ann is not None:
            self._step_ann.__exit__(None, None, None)
            self._step_ann = None
        steady = 0 if self._steady_from is None else step - self._steady_from
        if steady >= max(1, self.want_steady) or step >= self.steps:
            jax.block_until_ready(f)
            self._close_mark()
            self._stop_trace()
            first = self._first or 0
            self.window = {"first_step": first, "end_step": step, "steps": step - first,
                           "steady_from_step": self._steady_from, "loop_seconds": t_run - self._t_start,
                           "chunk_steps": self._chunk}
            if self._steady_from is None:
                log.warning("profile: the run ended inside the warm-up chunks (steps %d-%d): no steady-state window; "
                            "run more steps than one chunk (output.every or steps_per_dispatch set the chunk)",
                            first, step)
            elif (self._steady_from - first, step - self._steady_from) != (self.want_warmup, self.want_steady):
                log.info("profile: window in whole chunks of %d steps: warm-up steps %d-%d, steady %d-%d (asked %d + "
                         "%d)", self._chunk, first, self._steady_from, self._steady_from, step, self.want_warmup,
                         self.want_steady)

    def finish(self) -> dict[str, Any]:
        """Stop the trace if still running, analyse it, write the reports; a JSON-able summary for metrics.json."""
        if self.running:
            self._close_mark()
            self._stop_trace()
        compile_phases().listening = False
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
        k = self._chunk or 1
        programs = [dict(p, steps=k) for p in self.programs(k)]
        creport = write_compile_report(programs, self.stages, self.dir / "compile")
        if not creport["graphviz"]:
            log.info("profile: %s", creport["graphviz_note"])
        bw = measured_bandwidth(self.bandwidth)
        bw_gbs = bw["bandwidth_gbs"] if bw else None
        dev = jax.devices()[0]
        sync = bool(self.cfg["sync"])
        info = self.run_info
        title = (f"{info.get('case')} {'x'.join(map(str, info.get('grid', [])))} {info.get('lattice')} "
                 f"{info.get('precision')}, {self.mode} mode, {dev.platform}")
        how = open_instructions(self.dir, files.trace_json, files.perfetto_json)
        extra = {
            "run": {**info, "mode": self.mode, "sync": sync, "device": str(dev), "platform": dev.platform,
                    "chunk_steps": k},
            "profiled": self.window,
            "roofline": {"bandwidth_gbs": bw_gbs, "source": _bandwidth_source(bw), "detail": bw},
            "compile_report": {"graphviz": creport["graphviz"], "note": creport["graphviz_note"],
                               "report": "compile/compile.json"},
            "open": how,
            "files": {"compile": "compile/compile.json"},
        }
        facts = RunFacts(stages=self.stages, mode=self.mode, sync=sync, compile_report=creport,
                         compile_times_s=dict(self.compile_times()), compile_phases=compile_phases().record(),
                         bandwidth_gbs=bw_gbs)
        result = analyse(files, self.dir, facts, backend=self.cfg["backend"],
                         trace_processor=self.cfg["trace_processor"], title=title, extra=extra)
        log.info("profile: trace %s; queries on the %s", files.primary, result.backend_note)
        if self.cfg["backend"] == "perfetto" and result.backend != "perfetto":
            log.warning("profile: %s", result.backend_note)
        result.print()
        for line in how:
            log.info("profile: %s", line)
        for n in result.breakdown.notes:  # attribution gaps are warnings, explanations are information
            log.log(logging.WARNING if ("matched to" in n or "cannot" in n or "no XLA" in n) else logging.INFO,
                    "profile: %s", n)
        self.summary = summary(result, bw_gbs, self.dir, self.window)
        return self.summary


def _bandwidth_source(bw: Mapping[str, Any] | None) -> str | None:
    """Where the roofline bandwidth comes from, in words."""
    if not bw:
        return None
    return (f"measured in this process on {bw.get('device', 'the device')}: the {bw.get('roofline_kernel', 'best')} "
            f"kernel, median of {bw.get('repeats', '?')} repeats")


def summary(result: Analysis, bandwidth_gbs: float | None, profile_dir: Path,
            window: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON-able summary of a profiled run for metrics.json (``profile``): the headline table's stage rows."""
    bd = result.breakdown
    head = bd.tables[bd.headline]
    return {
        "dir": "profile",
        "mode": bd.mode,
        "clock": bd.headline,
        "clock_description": head.description,
        "statistic": head.statistic,
        "window": bd.window,
        "profiled": dict(window) if window else None,
        "timestep_mean_ms": {clock: (t.row(bdm.STEP) or {}).get("mean_ms") for clock, t in bd.tables.items()},
        "compile": bd.compile,
        "stages": {r["stage"]: {k: r.get(k) for k in ("status", "calls", "mean_ms", "median_ms", "share", "gbs",
                                                      "roofline_pct") if k in r}
                   for r in head.timed()},
        "bandwidth_gbs": bandwidth_gbs,
        "backend": result.backend,
        "trace": relative(result.trace.primary, profile_dir),
        "files": result.written,
    }
