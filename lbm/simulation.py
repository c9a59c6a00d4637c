"""The run loop: build the case, compile, advance in chunks, check, observe, write the run directory."""

from __future__ import annotations

import dataclasses
import logging
import math
import platform
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.cases import CASES, Case, Setup
from lbm.config import RunConfig, check_output_every
from lbm.errors import DivergenceError, LbmError
from lbm.io.fields import write_fields, write_json
from lbm.stepper import Stepper, fields_of, make_stepper

log = logging.getLogger("lbm")

RESULT_FILES = ("metrics.json", "fields.npz")


def make_case(run: RunConfig) -> Case:
    """Instantiate the configured case, check its parameters and resolve ``steps=auto`` (case.run is final)."""
    case = CASES[run.case](run)
    case.check()
    if run.steps is None:
        case.run = dataclasses.replace(run, steps=case.auto_steps())
        check_output_every(run.output_every, case.run.steps)
    return case


def chunk_size(run: RunConfig) -> int:
    """Steps per chunk: output.every, else steps_per_dispatch, else about a tenth of the run (at most 1000)."""
    if run.output_every:
        return run.output_every
    if run.steps_per_dispatch:
        return min(run.steps_per_dispatch, run.steps)
    return max(1, min(1000, run.steps // 10))


def device_description() -> dict[str, Any]:
    """The default device and the software that drives it."""
    dev = jax.devices()[0]
    return {
        "device": f"{dev.platform}:{getattr(dev, 'device_kind', '')}".rstrip(":"),
        "device_count": jax.device_count(),
        "jax": jax.__version__,
        "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else jax.__version__,
        "python": platform.python_version(),
        "host": platform.machine(),
    }


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


def fluid_mass(f: jnp.ndarray, fluid: jnp.ndarray) -> float:
    """Total density over fluid cells (float64 on the host)."""
    return float(np.sum(np.asarray(jnp.sum(f, axis=0), dtype=np.float64)[np.asarray(fluid)]))


@jax.jit
def _health(f: jnp.ndarray) -> jnp.ndarray:
    rho = jnp.sum(f, axis=0)
    return jnp.all(jnp.isfinite(rho) & (rho > 0.0) & (rho < 10.0))


def _first_bad(f: jnp.ndarray) -> tuple[int, ...]:
    rho = np.asarray(jnp.sum(f, axis=0))
    bad = ~np.isfinite(rho) | (rho <= 0) | (rho >= 10)
    return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else ()


def check_run_dir(run_dir: Path) -> None:
    """Refuse to write into a directory that already holds results."""
    existing = [name for name in RESULT_FILES if (run_dir / name).exists()]
    if existing:
        raise LbmError(
            f"run directory {run_dir} already holds results ({', '.join(existing)}); "
            "refusing to overwrite: choose another hydra.run.dir"
        )


def simulate(run: RunConfig, run_dir: Path) -> dict[str, Any]:
    """Run a validated configuration and write metrics.json, fields.npz, case files and plots into ``run_dir``."""
    check_run_dir(run_dir)
    if run.precision == "float64":
        jax.config.update("jax_enable_x64", True)
    case = make_case(run)
    run = case.run
    setup = case.setup()
    log_parameters(run, setup)

    stepper: Stepper = make_stepper(setup, run.mode, sync=bool(run.profile.get("sync")))
    f = setup.initial_populations()
    fluid = jnp.asarray(setup.fluid)
    mass0 = fluid_mass(f, fluid)
    k = chunk_size(run)
    profiler = None
    if run.profile.get("enabled"):
        # Profiling hook (lbm.profiling.capture.Profiler): started before compilation so the trace holds the
        # first call; it may cap chunk sizes inside its window and is told after each chunk.
        from lbm.profiling.capture import Profiler

        profiler = Profiler(run, setup, stepper, run_dir)
        profiler.start()

    # Compile before timing: the fused chunk ahead of time, the instrumented stages on a throw-away step.
    if run.mode == "fused":
        stepper.compiled(f, k)
        if run.steps % k:
            stepper.compiled(f, run.steps % k)
    else:
        jax.block_until_ready(stepper.advance(f + 0, 1)[0])
    log.info("compiled in %.2f s (%s)", stepper.compile_time_s,
             ", ".join(f"{n}: {t * 1e3:.0f} ms" for n, t in stepper.compile_times.items()))

    step, t_run = 0, 0.0
    try:
        while step < run.steps:
            n = min(k, run.steps - step)
            if profiler is not None:
                n = profiler.chunk_limit(step, n)
            t0 = time.perf_counter()
            f, aux = stepper.advance(f, n, first_step=step)
            healthy = bool(_health(f))
            t_run += time.perf_counter() - t0
            step += n
            if not healthy:
                loc = _first_bad(f)
                raise DivergenceError(
                    f"simulation diverged by step {step} (first bad cell {loc}): tau={setup.tau:.4f}, "
                    f"Mach={setup.derived['mach']:.3f}; lower flow.reynolds or flow.u_lattice, "
                    "or raise the grid resolution"
                )
            case.observe(step, f, aux)
            if profiler is not None:
                profiler.after_chunk(step, f)
            mlups = math.prod(setup.shape) * step / t_run / 1e6 if t_run > 0 else float("nan")
            eta = t_run / step * (run.steps - step)
            if step < run.steps and (10 * step) // run.steps == (10 * (step - n)) // run.steps:
                continue  # log about every 10% of the run
            log.info("step %d/%d  %.1f MLUPS  elapsed %.1f s  eta %.1f s", step, run.steps, mlups, t_run, eta)
    except BaseException as exc:
        status = "diverged" if isinstance(exc, DivergenceError) else "interrupted"
        write_json(run_dir / "metrics.json", build_metrics(run, setup, stepper, step, t_run, status))
        raise
    metrics = build_metrics(run, setup, stepper, step, t_run, "completed")
    if profiler is not None:
        metrics["profile"] = profiler.finish()

    fields = fields_of(f, setup)
    metrics["mass_rel_drift"] = fluid_mass(f, fluid) / mass0 - 1.0
    metrics.update(case.metrics(setup, fields, step))
    write_fields(run_dir / "fields.npz", fields)
    outputs = ["fields.npz"]
    outputs += case.write_outputs(run_dir, setup, fields, metrics)
    if run.plots:
        from lbm.io.plots import field_plots

        outputs += field_plots(run_dir, fields, f"{run.case} Re={setup.reynolds:g}")
    metrics["outputs"] = outputs + ["metrics.json"]
    write_json(run_dir / "metrics.json", metrics)
    log.info("wrote %s: %s", run_dir, ", ".join(metrics["outputs"]))
    summary = {k: metrics[k] for k in case_summary_keys(metrics)}
    log.info("result: %s", ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))
    return metrics


def build_metrics(run: RunConfig, setup: Setup, stepper: Stepper, step: int, t_run: float, status: str) -> dict[str, Any]:
    """The contract fields of metrics.json common to all cases."""
    cells = math.prod(setup.shape)
    return {
        "status": status,
        "case": run.case,
        "lattice": run.lattice,
        "collision": run.collision,
        "mode": run.mode,
        "precision": run.precision,
        "grid": list(setup.shape),
        "cells": cells,
        "fluid_cells": int(setup.fluid.sum()),
        "steps": step,
        "steps_requested": run.steps,
        "chunk_steps": chunk_size(run),
        **device_description(),
        "compile_time_s": stepper.compile_time_s,
        "compile_times_s": dict(stepper.compile_times),
        "wall_time_s": t_run,
        "mlups": cells * step / t_run / 1e6 if t_run > 0 else None,
        "mlups_clock": "host wall clock over the stepping loop, compilation excluded, one device sync per chunk",
        "tau": setup.tau,
        "nu": setup.nu,
        "u_lattice": run.u_lattice,
        "reynolds": setup.reynolds,
        "mach": setup.derived["mach"],
        "derived": setup.derived,
    }


def case_summary_keys(metrics: dict[str, Any]) -> list[str]:
    """Keys worth one log line at the end of a run."""
    keys = ["mlups", "compile_time_s", "mass_rel_drift", "cd_mean", "cl_amplitude", "strouhal",
            "ghia_u_max_abs_error", "ghia_v_max_abs_error", "profile_l2_rel_error", "decay_rel_error_max"]
    return [k for k in keys if k in metrics]
