"""The run loop: build the case, compile, advance in chunks, check, observe, checkpoint, write the run directory."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm import parallel
from lbm.cases import CASES, Case, Setup
from lbm.cases.base import Snapshot
from lbm.config import RunConfig, check_output_every, load
from lbm.config.run import single_device_refusal
from lbm.config.sections import mapping_of
from lbm.engines import Engine, EngineUnavailable, make_engine
from lbm.errors import ConfigError, DivergenceError, LbmError
from lbm.io.checkpoint import GLOB as CHECKPOINT_GLOB
from lbm.io.checkpoint import check_compatible, find_checkpoint, load_checkpoint, read_header, save_checkpoint
from lbm.io.fields import write_fields, write_json
from lbm.kernels.macroscopic import macroscopic
from lbm.lattice import Lattice
from lbm.progress import Progress
from lbm.stopping import Interrupted, StopSignals

log = logging.getLogger("lbm")

RESULT_FILES = ("metrics.json", "fields.npz")
LAST_GOOD_MAX_BYTES = 256 * 2**20
"""Without checkpoints, a host copy of the populations is kept per chunk (for divergence) up to this size."""
RHO_BOUNDS = (0.0, 5.0)
"""Densities outside this open interval count as diverged."""


def make_case(run: RunConfig) -> Case:
    """Instantiate the configured case, check its parameters and resolve ``steps=auto`` (case.run is final)."""
    case = CASES[run.case](run)
    case.check()
    if run.steps is None:
        case.run = dataclasses.replace(case.run, steps=case.auto_steps())
        check_output_every(run.output.every, case.run.steps)
        every = run.checkpoint.every
        if every > case.run.steps:
            raise ConfigError("checkpoint.every", every, f"an integer in [0, steps={case.run.steps}] (steps=auto)")
    return case


def resolve_parallel(run: RunConfig) -> RunConfig:
    """Where the job runs: start jax.distributed if asked (or detected), check the device count, resolve -1, and
    check that the devices compute float64 when the run asks for it.

    Must run before JAX touches a backend in a multi-process job; returns the run with its mesh.
    """
    p = run.parallel
    parallel.initialize(p.coordinator, p.num_processes, p.process_id)
    if run.precision == "float64":  # after jax.distributed: it touches the backend
        check_float64_supported()
    if run.parallel_devices == 1:
        return run
    devices = parallel.resolve_devices(run.parallel_devices)
    shape = parallel.mesh_shape(devices, p.mesh, run.grid)
    if devices > 1 and (refused := single_device_refusal(run.engine)):
        raise ConfigError("engine", run.engine, "xla or auto with parallel.devices > 1", refused)
    return dataclasses.replace(run, parallel_devices=devices, parallel_mesh=shape if devices > 1 else None)


def check_float64_supported() -> None:
    """float64 needs a backend with double precision (not TPU)."""
    platform = jax.devices()[0].platform
    if platform == "tpu":
        raise ConfigError("precision", "float64", "float32 on TPU (it has no float64 arithmetic)")


def prepare(config: RunConfig | Sequence[str]) -> tuple[Case, Setup]:
    """The one path from overrides (or a validated config) to a case and its Setup, used by every command.

    Overrides are validated once (lbm.config.load); ``steps=auto`` is resolved (``case.run`` is final);
    float64 is switched on when the run asks for it.
    """
    run = resolve_parallel(config if isinstance(config, RunConfig) else load(list(config)))
    if run.precision == "float64":
        jax.config.update("jax_enable_x64", True)
    case = make_case(run)
    return case, case.setup()


def chunk_size(run: RunConfig) -> int:
    """Steps per chunk: output.every, else steps_per_dispatch, else about a tenth of the run (at most 1000).

    With checkpoints the chunk also divides checkpoint.every, so chunks end on checkpoint steps.
    """
    if run.output.every:
        k = run.output.every
    elif run.steps_per_dispatch:
        k = min(run.steps_per_dispatch, run.steps)
    else:
        k = max(1, min(1000, run.steps // 10))
    every = run.checkpoint.every
    return math.gcd(k, every) if every else k


def device_description() -> dict[str, Any]:
    """The default device and the software that drives it."""
    from lbm.environment import device_label, environment

    env = environment()
    return {"device": device_label(), "device_count": env["device_count"], "jax": env["jax"], "jaxlib": env["jaxlib"],
            "python": env["python"], "host": env["host_machine"]}


def log_parameters(run: RunConfig, setup: Setup) -> None:
    """One block of derived parameters at the start of a run."""
    d = setup.derived
    cells = math.prod(setup.shape)
    log.info(
        "case=%s lattice=%s collision=%s mode=%s precision=%s grid=%s cells=%d (fluid %d) steps=%d",
        run.case, run.lattice, run.collision, run.mode, run.precision, "x".join(map(str, setup.shape)),
        cells, int(setup.fluid.sum()), run.steps,
    )
    log.info(
        "derived: Re=%.6g tau=%.6f nu=%.6g (lattice units) omega=%.6f u_lattice=%.4g Mach=%.4f L=%g cells",
        d["reynolds"], d["tau"], d["nu"], d["omega"], d["u_lattice"], d["mach"], d["reference_length"],
    )


@functools.partial(jax.jit, static_argnums=2)
def chunk_stats(f: jnp.ndarray, fluid: jnp.ndarray, lattice: Lattice) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """One reduction on the device: (healthy, fluid mass, fluid kinetic energy)."""
    rho, u = macroscopic(f, lattice)
    usq = jnp.sum(u * u, axis=0)
    healthy = jnp.all(jnp.isfinite(rho) & (rho > RHO_BOUNDS[0]) & (rho < RHO_BOUNDS[1]) & (usq < 1.0))
    mass = jnp.sum(jnp.where(fluid, rho, 0.0))
    energy = jnp.sum(jnp.where(fluid, 0.5 * rho * usq, 0.0))
    return healthy, mass, energy


def first_bad_cell(f: np.ndarray, lattice: Lattice) -> tuple[int, ...]:
    """Index of the first cell with a non-finite or out-of-bounds density or velocity."""
    rho, u = (np.asarray(a) for a in macroscopic(jnp.asarray(f), lattice))
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(rho) | (rho <= RHO_BOUNDS[0]) | (rho >= RHO_BOUNDS[1]) | ~((u * u).sum(0) < 1.0)
    return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else ()


def likely_cause(setup: Setup, cell: tuple[int, ...] = ()) -> str:
    """The most probable reason a run diverged, with the fix to try; names the boundary conditions on ``cell``."""
    tau, mach = setup.tau, setup.derived["mach"]
    if tau < 0.52:
        cause = (f"tau={tau:.4f} is too close to 0.5 for this resolution: raise the grid resolution, lower "
                 "flow.reynolds, or use collision=trt")
    elif mach > 0.2:
        cause = f"Mach {mach:.2f} is too high: lower flow.u_lattice (<= 0.1)"
    else:
        cause = (f"the resolution is probably too low for Re={setup.reynolds:g} (tau={tau:.4f}, Mach={mach:.3f}): "
                 "raise the grid resolution or lower flow.reynolds")
    flat = int(np.ravel_multi_index(cell, setup.shape)) if len(cell) == len(setup.shape) else -1
    names = []
    for bc in setup.boundaries:
        fp = bc.footprint(setup.shape, setup.lattice)
        if flat in fp.face or flat in fp.cells:
            kind = getattr(bc, "kind", None)
            names.append(f"{bc.stage} ({type(bc).__name__}{f', kind {kind}' if isinstance(kind, str) else ''})")
    if not names:
        return cause
    return (f"the cell lies on the boundary condition {' and '.join(names)}, the likely cause: try collision=trt or "
            f"another kind of it (e.g. case.inlet=nebb for a velocity inlet); or {cause}")


def log_engine_choice(engine: Engine, fallback_possible: bool = True) -> None:
    """One line naming the fused engine; a warning saying what is lost, and how to get it, when native fell back.

    ``fallback_possible``: engine=auto on one device, the only request that can fall back from native to xla.
    """
    from lbm.engines.native import build

    if not fallback_possible or engine.name != "xla" or not engine.note or jax.default_backend() != "cpu":
        log.info("%s engine: %s%s", engine.mode, engine.name, f" ({engine.note})" if engine.note else "")
        return
    fix = ("install a C++ compiler (e.g. apt install g++, or set CXX) and rerun: kernels build on first use"
           if build.compiler() is None else "engine=xla silences this note")
    # 3-5x: python -m lbm bench grid.nx=128 grid.ny=128 cylinder_grid.nx=168 cylinder_grid.ny=72 variants=[auto,xla]
    # on a 2-core laptop: periodic 250 vs 57 MLUPS (4.4x), cylinder 130 vs 42 MLUPS (3.1x)
    log.warning("fused engine: xla, not the native C++ engine (%s): CPU runs are about 3-5x slower; %s",
                engine.note, fix)


def check_run_dir(run_dir: Path, setting: str = "hydra.run.dir") -> None:
    """Refuse to write into a directory that already holds results (``setting``: the key that chooses it)."""
    existing = [name for name in RESULT_FILES if (run_dir / name).exists()]
    if existing:
        raise LbmError(
            f"run directory {run_dir} already holds results ({', '.join(existing)}); "
            f"refusing to overwrite: choose another {setting}"
        )


def identity(run: RunConfig, setup: Setup) -> dict[str, Any]:
    """What a checkpoint records about its run, to refuse resuming an incompatible one."""
    return {
        "case": run.case, "lattice": run.lattice, "grid": list(setup.shape), "precision": run.precision,
        "collision": run.collision, "trt_magic": run.trt_magic if run.collision == "trt" else None,
        "tau": setup.tau, "u_lattice": run.u_lattice, "case_params": mapping_of(run.case_params),
    }


class Outputs:
    """Per-chunk outputs: monitor rows, VTK files and PNG frames at output intervals."""

    def __init__(self, run: RunConfig, run_dir: Path, engine: Engine) -> None:
        self.run, self.run_dir, self.engine = run, run_dir, engine
        self.monitor: list[tuple[int, float, float]] = []
        self.files: list[str] = []
        self.frames: list[Path] = []
        self.frame_limit: float | None = run.output.frame_limit
        """The colour limit of every vorticity frame: output.frame_limit, else the first frame's (set by it)."""

    def chunk_done(self, snapshot: Snapshot, mass: float, energy: float, every: int) -> None:
        """Record the monitored quantities; write VTK and frames when the chunk ends on the output interval."""
        step = snapshot.step
        self.monitor.append((step, mass, energy))
        on_interval = step % every == 0 or step == self.run.steps
        if not (self.run.output.vtk or self.run.output.frames) or not on_interval:
            return
        if not parallel.is_writer():
            snapshot.fields  # noqa: B018 (gathered on every process; process 0 writes)
            return
        fields = self.engine.setup.written_fields(snapshot.fields)
        if self.run.output.vtk:
            from lbm.io.vtk import write_vti

            path = write_vti(self.run_dir / "vtk" / f"fields_{step:010d}.vti", fields)
            self.files.append(str(path.relative_to(self.run_dir)))
        if self.run.output.frames:
            from lbm.io.plots import frame

            path = self.run_dir / "frames" / f"vorticity_{step:010d}.png"
            self.frame_limit = frame(path, fields, step, self.frame_limit)
            self.frames.append(path)


def engine_for(run: RunConfig, setup: Setup) -> Engine:
    """The run's engine (one line naming it); LbmError when the engine asked for cannot run here."""
    try:
        engine = make_engine(setup, run.mode, engine=run.engine, sync=run.profile.sync,
                             mesh=run.parallel_mesh, partitioner=run.parallel.partitioner)
    except EngineUnavailable as exc:
        hint = "" if run.parallel_mesh else "; engine=auto falls back to the xla engine"
        raise LbmError(f"engine={run.engine} is not available here: {exc}{hint}") from None
    if run.mode == "fused" or run.parallel_mesh:
        log_engine_choice(engine, fallback_possible=run.engine == "auto" and not run.parallel_mesh)
    elif run.engine != "auto":  # one device, instrumented: the engine setting has nothing to choose
        log.info("engine=%s is not used: it chooses how mode=fused computes a step; mode=instrumented runs each stage "
                 "as its own jit", run.engine)
    return engine


def check_resume(run: RunConfig, setup: Setup) -> dict[str, Any] | None:
    """The header of the checkpoint ``checkpoint.resume`` names (None without one), read without its arrays;
    LbmError when it cannot continue this run (another identity, population layout, or no step left to run)."""
    path = run.checkpoint.resume
    if not path:
        return None
    header = read_header(find_checkpoint(Path(path)))
    check_compatible(header["identity"], identity(run, setup), header["path"])
    shape, dtype = (setup.lattice.q, *setup.shape), np.dtype(run.precision)
    if header["shape"] != shape or header["dtype"] != dtype:
        raise LbmError(f"cannot resume from {header['path']}: populations {header['shape']} {header['dtype']} "
                       f"do not fit this run's {shape} {dtype}")
    if header["step"] >= run.steps:
        raise LbmError(f"cannot resume from {header['path']}: it is at step {header['step']} and steps={run.steps}; "
                       f"set steps above {header['step']}")
    return header


def resume(run: RunConfig, case: Case, setup: Setup, outputs: Outputs, place: Any, f: jnp.ndarray, mass0: float
           ) -> tuple[int, jnp.ndarray, float]:
    """(step, populations, initial mass) to start from: a checkpoint's when ``checkpoint.resume`` is set."""
    header = check_resume(run, setup)
    if header is None:
        return 0, f, mass0
    ckpt = load_checkpoint(header["path"])
    step = ckpt["step"]
    state = ckpt["state"]
    mass0 = float(state.pop("run/mass0"))
    outputs.monitor = [(int(s), float(m), float(e)) for s, m, e in state.pop("run/monitor")]
    case.load_state(state)
    log.info("resumed from %s at step %d", ckpt["path"], step)
    return step, place(jnp.asarray(ckpt["f"])), mass0


def start_profiler(run: RunConfig, run_dir: Path, engine: Engine, place: Any) -> Any:
    """The started profiler when ``profile.enabled`` (None otherwise).

    Started before compilation so that the trace holds it; the loop tells it about each chunk (the run's own
    chunks: profiling changes no chunk, so a profiled run observes and reports the same steps).
    """
    if not run.profile.enabled:
        return None
    from lbm.profiling.capture import Profiler
    from lbm.roofline import measure_bandwidth

    setup = engine.setup
    profiler = Profiler(
        run_dir / "profile", run.profile, mode=engine.mode, steps=run.steps,
        stages=list(engine.stage_names),
        run_info={"case": run.case, "grid": list(setup.shape), "lattice": run.lattice, "precision": run.precision},
        programs=engine.describe, compile_times=lambda: engine.compile_times, bandwidth=measure_bandwidth)
    profiler.start()
    return profiler


def simulate(run: RunConfig, run_dir: Path) -> dict[str, Any]:
    """Run a validated configuration and write metrics.json, fields.npz, case files and plots into ``run_dir``."""
    check_run_dir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    case, setup = prepare(run)
    parallel.own_log_file(run_dir)  # after prepare: jax.distributed knows this process's index
    run = case.run
    log_parameters(run, setup)
    engine = engine_for(run, setup)
    place, fluid = sharded_placement(engine, setup)
    f = place(setup.initial_populations())
    outputs = Outputs(run, run_dir, engine)
    mass0 = float(chunk_stats(f, fluid, setup.lattice)[1])
    step, f, mass0 = resume(run, case, setup, outputs, place, f, mass0)
    start, k, every_ckpt = step, chunk_size(run), run.checkpoint.every
    profiler = start_profiler(run, run_dir, engine, place)
    compile_ahead(engine, f, run, start, k)
    checkpoint = functools.partial(write_checkpoint, run, run_dir, case, setup, outputs, mass0)
    t_run, last_good, stopped_early = 0.0, None, None
    status, error = "completed", None
    keep_host_copy = not every_ckpt and f.nbytes <= LAST_GOOD_MAX_BYTES
    progress = Progress(run.steps, start, math.prod(setup.shape), run.output.progress)
    interrupted = build_metrics(run, setup, engine, 0, 0.0, "interrupted")

    def record_hard_exit() -> None:  # from the signal watcher thread: no device access, one small file
        write_json(run_dir / "metrics.json", interrupted | {
            "steps_timed": step - start, "wall_time_s": t_run, "step_reached": step,
            "error": "stopped at once by a second signal; the last checkpoint (if any) is in checkpoints/"})

    try:
        with StopSignals(on_hard_exit=record_hard_exit) as signals:
            log.info("stepping from step %d to %d (Ctrl-C or SIGTERM: stop after this chunk with a checkpoint; "
                     "twice: stop at once)", step, run.steps)
            while step < run.steps:
                n = min(k - step % k, run.steps - step)
                if profiler is not None:
                    n = profiler.chunk_limit(step, n, t_run)
                if keep_host_copy:
                    last_good = (step, np.array(parallel.to_host(f), copy=True))
                t0 = time.perf_counter()
                f, aux = engine.advance(f, n, first_step=step)
                healthy, mass, energy = (np.asarray(v).item() for v in chunk_stats(f, fluid, setup.lattice))
                t_run += time.perf_counter() - t0
                step += n
                if not healthy:
                    raise diverged(f, step, setup)
                snapshot = Snapshot(step, aux, lambda f=f, step=step: engine.fields(f, step), populations=f)
                case.observe(snapshot)
                outputs.chunk_done(snapshot, mass, energy, k)
                if profiler is not None:
                    profiler.after_chunk(step, f, t_run)
                progress.update(step, t_run)
                if every_ckpt and step % every_ckpt == 0:
                    checkpoint(step, f)
                if run.steps_auto and step < run.steps and case.converged(step):
                    log.info("steady state reached after %d steps (steps=auto): stopping", step)
                    stopped_early = step
                    break
                if signals.signum is not None and step < run.steps:
                    status, error = "interrupted", interrupted_by(signals.signum, step, run, run_dir, checkpoint(step, f))
                    break
    except DivergenceError as exc:
        progress.close()
        metrics = build_metrics(run, setup, engine, step - start, t_run, "diverged") | {
            "diverged_at_step": step, "error": str(exc)}
        write_diverged(run, run_dir, case, engine, place, metrics, outputs, mass0, profiler,
                       latest_good_state(run_dir, last_good))
        raise
    except BaseException:
        progress.close()
        write_metrics(run_dir, build_metrics(run, setup, engine, step - start, t_run, "interrupted") | {
            "step_reached": step})
        raise
    progress.close()
    metrics = build_metrics(run, setup, engine, step - start, t_run, status, profiled=profiler.window if profiler
                            is not None else None) | run_extent(run, start, step, stopped_early)
    finish(run, run_dir, case, engine, f, metrics, outputs, mass0, profiler)
    if error is not None:
        raise error
    return metrics


def diverged(f: jnp.ndarray, step: int, setup: Setup) -> DivergenceError:
    """The error of a run whose populations left the healthy range by ``step``, naming the first bad cell."""
    loc = first_bad_cell(parallel.to_host(f), setup.lattice)
    return DivergenceError(f"simulation diverged by step {step} (first bad cell {loc}): {likely_cause(setup, loc)}")


def write_diverged(run: RunConfig, run_dir: Path, case: Case, engine: Engine, place: Any, metrics: dict[str, Any],
                   outputs: Outputs, mass0: float, profiler: Any, last_good: tuple[int, np.ndarray] | None) -> None:
    """A diverged run's results: the fields of the last good state where one is kept, else metrics.json alone."""
    if last_good is not None:
        metrics["fields_from_step"] = last_good[0]
        finish(run, run_dir, case, engine, place(jnp.asarray(last_good[1])), metrics, outputs, mass0, profiler)
    else:
        write_metrics(run_dir, metrics)


def write_metrics(run_dir: Path, metrics: dict[str, Any]) -> None:
    """metrics.json, written by the writing process alone."""
    if parallel.is_writer():
        write_json(run_dir / "metrics.json", metrics)


def compile_ahead(engine: Engine, f: jnp.ndarray, run: RunConfig, start: int, k: int) -> None:
    """Compile before timing: the fused chunks of every length the run needs, the instrumented stages once."""
    for n in chunk_lengths(start, run.steps, k) if run.mode == "fused" else (1,):
        engine.compile(f, n)
    log.info("compiled in %.2f s (%s)", engine.compile_time_s,
             ", ".join(f"{n}: {t * 1e3:.0f} ms" for n, t in engine.compile_times.items()))


def write_checkpoint(run: RunConfig, run_dir: Path, case: Case, setup: Setup, outputs: Outputs, mass0: float,
                     at: int, pops: Any) -> Path:
    """Write the checkpoint of step ``at`` (populations, identity, the case's series), keeping the newest ones."""
    state = {**case.state(), "run/mass0": np.float64(mass0),
             "run/monitor": np.array(outputs.monitor, dtype=np.float64).reshape(-1, 3)}
    host = parallel.to_host(pops)  # every process takes part in the gather; process 0 writes
    if not parallel.is_writer():
        return run_dir / "checkpoints"
    path = save_checkpoint(run_dir / "checkpoints", at, host, identity(run, setup), state, run.checkpoint.keep)
    log.info("checkpoint %s", path.relative_to(run_dir))
    return path


def interrupted_by(signum: int, step: int, run: RunConfig, run_dir: Path, path: Path) -> Interrupted:
    """The error a run stopped by ``signum`` after writing checkpoint ``path`` ends with."""
    return Interrupted(f"stopped by {signal.Signals(signum).name} at step {step}/{run.steps}; results and checkpoint "
                       f"in {run_dir}; resume with the same overrides plus checkpoint.resume={path}", signum)


def run_extent(run: RunConfig, start: int, step: int, stopped_early: int | None) -> dict[str, Any]:
    """Where the run started and stopped: ``step_reached``, and why it stopped early or where it resumed."""
    out: dict[str, Any] = {"step_reached": step}
    if stopped_early is not None:
        out["steps"] = step
        out["stopped_early"] = f"steady after {step} steps (case tolerance reached; steps=auto allowed {run.steps})"
    if start:
        out["resumed_from_step"] = start
    return out


def sharded_placement(engine: Engine, setup: Setup) -> tuple[Any, jnp.ndarray]:
    """How populations reach the engine (sharded over its mesh, or as they are) and the fluid mask placed alike."""
    return engine.place, engine.place_cells(setup.fluid)


def chunk_lengths(start: int, steps: int, k: int) -> set[int]:
    """Distinct chunk lengths of a run from ``start`` to ``steps`` whose chunks end on multiples of k."""
    lengths, s = set(), start
    while s < steps:
        n = min(k - s % k, steps - s)
        lengths.add(n)
        s += n
    return lengths


def latest_good_state(run_dir: Path, in_memory: tuple[int, np.ndarray] | None) -> tuple[int, np.ndarray] | None:
    """The newest healthy state: the in-memory copy of the last chunk, else the newest checkpoint."""
    if in_memory is not None:
        return in_memory
    found = sorted((run_dir / "checkpoints").glob(CHECKPOINT_GLOB))
    if not found:
        return None
    ckpt = load_checkpoint(found[-1])
    return ckpt["step"], ckpt["f"]


def finish(run: RunConfig, run_dir: Path, case: Case, engine: Engine, f: jnp.ndarray, metrics: dict[str, Any],
           outputs: Outputs, mass0: float, profiler: Any) -> None:
    """Write fields, the case's files, plots, the monitor and metrics.json (last, with the list of outputs)."""
    from lbm.cases.base import result_checks

    setup = engine.setup
    if profiler is not None:
        metrics["profile"] = profiler.finish()
    reached = int(metrics.get("step_reached", run.steps))
    at = int(metrics.get("fields_from_step", reached))  # the step of the populations f
    fields = setup.written_fields(engine.fields(f, at))
    mass = float(chunk_stats(f, sharded_placement(engine, setup)[1], setup.lattice)[1])
    metrics["mass_rel_drift"] = mass / mass0 - 1.0
    metrics.update(case.metrics(setup, fields, reached))
    own = [k for k in case_summary_keys(metrics) if k not in ("mlups", "compile_time_s", "mass_rel_drift")]
    metrics.update(result_checks(case, setup, metrics, at, own))
    if not parallel.is_writer():  # the shared files of the run directory come from process 0
        return
    write_fields(run_dir / "fields.npz", fields)
    written = ["fields.npz"] + case.write_outputs(run_dir, setup, fields, metrics)
    written.append(write_monitor(run_dir, outputs.monitor, mass0))
    written += outputs.files
    if run.output.plots:
        from lbm.io.plots import field_plots, monitor_plot

        written += field_plots(run_dir, fields, f"{run.case} Re={setup.reynolds:g}")
        if len(outputs.monitor) >= 2:
            written.append(monitor_plot(run_dir, outputs.monitor, mass0, case, metrics))
    if run.output.frames and run.output.animation and len(outputs.frames) >= 2:
        from lbm.io.plots import animation

        written += animation(run_dir, outputs.frames)
    metrics["outputs"] = written + ["metrics.json"]
    write_json(run_dir / "metrics.json", metrics)
    log.info("wrote %s: %s", run_dir, ", ".join(metrics["outputs"]))
    summary = {key: metrics[key] for key in case_summary_keys(metrics)}
    log.info("result (%s): %s", metrics["status"],
             ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))
    for warning in metrics["warnings"]:
        log.warning(warning)


def write_monitor(run_dir: Path, rows: list[tuple[int, float, float]], mass0: float) -> str:
    """monitor.csv: step, fluid mass, relative mass drift, kinetic energy (lattice units) per chunk."""
    with (run_dir / "monitor.csv").open("w") as fh:
        fh.write("step,mass,mass_rel_drift,kinetic_energy\n")
        for s, m, e in rows:
            fh.write(f"{s},{m:.12e},{m / mass0 - 1.0:.6e},{e:.9e}\n")
    return "monitor.csv"


def build_metrics(run: RunConfig, setup: Setup, engine: Engine, steps_timed: int, t_run: float,
                  status: str, profiled: dict[str, Any] | None = None) -> dict[str, Any]:
    """The contract fields of metrics.json common to all cases; ``profiled``: the profile window (its steps and
    loop seconds), which ``mlups`` leaves out."""
    cells = math.prod(setup.shape)
    n_prof, t_prof = (profiled["steps"], profiled["loop_seconds"]) if profiled else (0, 0.0)
    unprofiled_s = t_run - t_prof
    return {
        "status": status,
        "case": run.case,
        "lattice": run.lattice,
        "collision": run.collision,
        "mode": run.mode,
        "engine": engine.name,
        "engine_note": engine.note,
        "precision": run.precision,
        "grid": list(setup.shape),
        "cells": cells,
        "fluid_cells": int(setup.fluid.sum()),
        "steps": run.steps,
        "chunk_steps": chunk_size(run),
        **device_description(),
        "compile_time_s": engine.compile_time_s,
        "compile_times_s": dict(engine.compile_times),
        "wall_time_s": t_run,
        "mlups": cells * (steps_timed - n_prof) / unprofiled_s / 1e6 if unprofiled_s > 0 and steps_timed > n_prof
        else None,
        "mlups_clock": "host wall clock over the stepping loop, compilation excluded, one device sync per chunk"
        + (", the profiled steps left out" if profiled else ""),
        **({"profiled_steps": profiled} if profiled else {}),
        "parallel": parallel_description(run, engine),
        "tau": setup.tau,
        "nu": setup.nu,
        "u_lattice": run.u_lattice,
        "reynolds": setup.reynolds,
        "mach": setup.derived["mach"],
        "derived": dict(setup.derived),
    }


def parallel_description(run: RunConfig, engine: Engine) -> dict[str, Any]:
    """Devices, mesh, partitioner and processes of the run."""
    layout = engine.layout
    return {"devices": run.parallel_devices, "mesh": list(layout.shape) if layout is not None else None,
            "block": list(layout.block) if layout is not None else None,
            "partitioner": run.parallel.partitioner if layout is not None else None,
            "processes": jax.process_count()}


def case_summary_keys(metrics: dict[str, Any]) -> list[str]:
    """Keys worth one log line at the end of a run."""
    keys = ["mlups", "compile_time_s", "mass_rel_drift", "converged", "cd_mean", "cl_amplitude", "strouhal",
            "cd", "cl", "dp", "la", "cd_max", "cl_max", "dp_t8",
            "ghia_u_max_abs_error", "ghia_v_max_abs_error", "albensoeder_u_max_abs_error",
            "albensoeder_v_max_abs_error", "profile_l2_rel_error", "duct_max_error_over_umax", "decay_rel_error_max"]
    return [k for k in keys if k in metrics]
