"""The start of a run: the case and its Setup, the engine, the run directory, resume, the profiler, compilation."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm import parallel
from lbm.cases import CASES, Case, Setup
from lbm.config import RunConfig, check_output_every, load
from lbm.config.command_line import RESULT_FILES
from lbm.config.defaults import log_picks
from lbm.config.run import single_device_refusal
from lbm.engines import Engine, EngineUnavailable, make_engine
from lbm.environment import use_precision
from lbm.errors import ConfigError, LbmError
from lbm.io.checkpoint import DEVIATIONS, check_compatible, find_checkpoint, load_checkpoint, read_header
from lbm.kernels.equilibrium import shifted
from lbm.lattice import Lattice
from lbm.simulation.health import chunk_stats
from lbm.simulation.outputs import Outputs, identity
from lbm.simulation.state import Started, chunk_lengths, chunk_size

log = logging.getLogger("lbm")



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
    if run.devices == 1:
        return run
    devices = parallel.resolve_devices(run.devices)
    shape = parallel.mesh_shape(devices, p.mesh, run.grid)
    if devices > 1 and (refused := single_device_refusal(run.engine)):
        raise ConfigError("engine", run.engine, "xla or auto with parallel.devices > 1", refused)
    return dataclasses.replace(run, mesh_shape=shape if devices > 1 else None)


NO_FLOAT64 = {"tpu": "TPU has no float64 arithmetic"}
"""Platforms without double precision, and why."""


def float64_refusal(platform: str) -> str | None:
    """Why ``platform`` cannot run precision=float64, or None where it can."""
    return NO_FLOAT64.get(platform)


def check_float64_supported() -> None:
    """float64 needs a backend with double precision (not TPU)."""
    platform = jax.devices()[0].platform
    if float64_refusal(platform):
        raise ConfigError("precision", "float64", f"float32 on {platform.upper()} ({float64_refusal(platform)})")


def prepare(config: RunConfig | Sequence[str]) -> tuple[Case, Setup]:
    """The one path from overrides (or a validated config) to a case and its Setup, used by every command.

    Overrides are validated once (lbm.config.load); ``steps=auto`` is resolved (``case.run`` is final);
    float64 is switched on when the run asks for it (and left on: the caller keeps the arrays; a run puts it back,
    :func:`lbm.environment.precision_scope`).
    """
    run = resolve_parallel(config if isinstance(config, RunConfig) else load(list(config)))
    use_precision(run.precision)
    if PREPARED and PREPARED[0][0] == run:  # preflight built them for this run: the grid-sized arrays once
        return PREPARED.pop()[1:]
    PREPARED.clear()
    case = make_case(run)
    return case, case.setup()


PREPARED: list[tuple[RunConfig, Case, Setup]] = []
"""The case and Setup that preflight built for the run about to start (at most one), which :func:`prepare` takes
for the same resolved config instead of building them again (at 512^3 a setup takes minutes of the host)."""


def keep_prepared(run: RunConfig, case: Case, setup: Setup) -> None:
    """Hand the case and Setup preflight built for ``run`` (resolved) to the next :func:`prepare` of it."""
    PREPARED[:] = [(run, case, setup)]


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
    log_picks(run.case, run.picked)  # the keys the case chose where the user left them open (lbm.config.defaults)


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



def build_engine(run: RunConfig, setup: Setup) -> Engine:
    """The run's engine, built without a word; LbmError when the engine asked for cannot run here (lbm.api.preflight
    builds it once before the run directory exists, so that this refusal comes first)."""
    try:
        return make_engine(setup, run.mode, engine=run.engine, sync=run.profile.sync,
                           mesh=run.mesh_shape, partitioner=run.parallel.partitioner, native=run.native)
    except EngineUnavailable as exc:
        hint = "" if run.mesh_shape else "; engine=auto falls back to the xla engine"
        raise LbmError(f"engine={run.engine} is not available here: {exc}{hint}") from None


def engine_for(run: RunConfig, setup: Setup) -> Engine:
    """The run's engine (one line naming it); LbmError when the engine asked for cannot run here."""
    engine = build_engine(run, setup)
    if run.mode == "fused" or run.mesh_shape:
        log_engine_choice(engine, fallback_possible=run.engine == "auto" and not run.mesh_shape)
    elif run.engine not in ("auto", "xla"):  # one device, instrumented: the xla engine's stages, whatever was asked
        log.info("engine=%s is not used: it chooses how mode=fused computes a step; mode=instrumented runs each stage "
                 "of the xla engine as its own jit", run.engine)
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
    return step, place(engine_state(ckpt["f"], ckpt["populations"], setup.lattice)), mass0  # from the host: one copy


def engine_state(f: np.ndarray, populations: str, lattice: Lattice) -> np.ndarray:
    """A checkpoint's populations as the engines hold them, deviations f - w (lbm.kernels.equilibrium): a checkpoint
    of absolute populations f (written before the engines kept deviations) is shifted in float64, then rounded."""
    if populations == DEVIATIONS:
        return f
    return shifted(np.asarray(f, np.float64), lattice).astype(f.dtype)


def start_profiler(run: RunConfig, run_dir: Path, engine: Engine, place: Any) -> Any:
    """The started profiler when ``profile.enabled`` (None otherwise).

    Started before compilation so that the trace holds it; the loop tells it about each chunk (the run's own
    chunks: profiling changes no chunk, so a profiled run observes and reports the same steps).
    """
    if not run.profile.enabled:
        return None
    from lbm.engines.native.stream import probe
    from lbm.profiling.capture import Profiler
    from lbm.roofline import measure_bandwidth

    setup = engine.setup
    profiler = Profiler(
        run_dir / "profile", run.profile, mode=engine.mode, steps=run.steps,
        stages=list(engine.stage_names),
        run_info={"case": run.case, "grid": list(setup.shape), "lattice": run.lattice, "precision": run.precision},
        programs=engine.describe, compile_times=lambda: engine.compile_times,
        bandwidth=lambda: measure_bandwidth(host=probe()))
    profiler.start()
    return profiler


def compile_ahead(engine: Engine, f: jnp.ndarray, run: RunConfig, start: int, k: int) -> None:
    """Compile before timing: the fused chunks of every length the run needs, the instrumented stages once."""
    for n in chunk_lengths(start, run.steps, k) if run.mode == "fused" else (1,):
        engine.compile(f, n)
    log.info("compiled in %.2f s (%s)", engine.compile_time_s,
             ", ".join(f"{n}: {t * 1e3:.0f} ms" for n, t in engine.compile_times.items()))




def sharded_placement(engine: Engine, setup: Setup) -> tuple[Any, jnp.ndarray]:
    """How populations reach the engine (sharded over its mesh, or as they are) and the fluid mask placed alike."""
    return engine.place, engine.place_cells(setup.fluid)




def start(run: RunConfig, run_dir: Path) -> Started:
    """Everything before the first chunk: the run directory, case, engine, initial or resumed state, the profiler
    (started before compilation, so that its trace holds it), and the compiled chunks."""
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
    outside = engine.outside_cells()
    mass0 = float(chunk_stats(f, fluid, setup.lattice, outside)[1])
    step, f, mass0 = resume(run, case, setup, outputs, place, f, mass0)
    k = chunk_size(run)
    profiler = start_profiler(run, run_dir, engine, place)
    compile_ahead(engine, f, run, step, k)
    return Started(run=run, run_dir=run_dir, case=case, setup=setup, engine=engine, place=place, fluid=fluid,
                   outside=outside, f=f, start=step, mass0=mass0, chunk=k, outputs=outputs, profiler=profiler)
