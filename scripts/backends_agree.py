"""Where a configuration's numbers part between JAX's default backend (a TPU or GPU) and the same process's CPU
(issue 38: every engine's fields within 1e-5 of the CPU's xla engine after 1000 steps).

  python scripts/backends_agree.py [--steps 1,10,100,1000] [--stage-steps 0,500] [--engine xla]
                                   [--dump STAGE@STEP,... --dump-dir DIR] [--pair-2d-at-every-size] -- OVERRIDES

Two checks, each on both backends of one process (``jax.default_device``), and printed as lines:

- ``steps``: the populations after each of ``--steps`` steps (cumulative) of the fused ``--engine`` (on the CPU:
  the xla engine), the largest difference relative to the CPU's largest |f| (f - w), where it is (population,
  cell) and the largest relative differences of rho and u there;
- ``stages``: from the CPU's state after each of ``--stage-steps`` steps, one instrumented step on both backends,
  each stage fed the CPU's output of the stage before it, so that a stage's difference is its own: per stage and
  array of the step state (f, drho, u, feq, post, ...), the largest difference relative to the CPU's largest |value|
  and where it is.

On a machine without an accelerator both sides are the CPU (a rehearsal: every difference 0).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from fields_agree import relative  # scripts/ is on sys.path when this script runs


def backends() -> tuple[Any, Any]:
    """The CPU device and the default backend's first device (the CPU again without an accelerator)."""
    return jax.devices("cpu")[0], jax.devices()[0]


def steps_apart(overrides: list[str], steps: list[int], engine: str) -> dict[int, dict[str, tuple[float, str]]]:
    """Per step count of ``steps`` (cumulative): f's, rho's and u's largest difference between the fused ``engine`` on
    the default backend and the CPU's xla engine (the reference of issue 38's check; pallas on a CPU would run in
    interpret mode), relative to the CPU's largest |value|, and where it is (:func:`relative`)."""
    from lbm.engines import make_engine
    from lbm.simulation import prepare

    cpu, dev = backends()
    _, setup = prepare(overrides)
    states = {}
    for device in (cpu, dev):
        with jax.default_device(device):
            name = "xla" if device is cpu else engine
            stepper = make_engine(setup, "fused", engine=name, platform=device.platform)
            if device is not cpu:
                print(f"engine on {device.platform}: {stepper.name}: {stepper.note}", flush=True)
            f = stepper.place(setup.initial_populations())
            done, seen = 0, {}
            for n in steps:
                f, aux = stepper.advance(f, n - done, first_step=done)
                done = n
                seen[n] = (stepper.host_populations(f), stepper.fields(f, n), np.asarray(aux.get("force", np.zeros(0))))
            states[device.platform] = seen
    ref, other = states[cpu.platform], states[dev.platform]
    apart = {}
    for n in steps:
        (f_ref, fields_ref, force_ref), (f, fields, force) = ref[n], other[n]
        apart[n] = {"f": relative(f, f_ref), "rho": relative(fields["rho"], fields_ref["rho"]),
                    "u": relative(fields["u"], fields_ref["u"])}
        if force_ref.size:  # the force of every step of the last chunk (a Forces condition)
            apart[n]["force"] = relative(force, force_ref)
    return apart


def check_steps(overrides: list[str], steps: list[int], engine: str) -> None:
    """Print :func:`steps_apart`, a line per step count."""
    for n, apart in steps_apart(overrides, steps, engine).items():
        (f, f_at), (rho, _), (u, u_at) = apart["f"], apart["rho"], apart["u"]
        force = f"; force {apart['force'][0]:.2e}" if "force" in apart else ""
        print(f"steps {n:5d} {engine}: f {f:.2e} at {f_at}; rho {rho:.2e}; u {u:.2e} at {u_at}{force}", flush=True)


def check_stages(overrides: list[str], at_steps: list[int], dump: set[str], dump_dir: Path) -> None:
    """One instrumented step from the CPU's state after each of ``at_steps`` steps, stage by stage on both backends;
    the stages named in ``dump`` (``stage@step``) leave their input and both outputs in ``dump_dir``."""
    from lbm.boundaries.base import StepState
    from lbm.engines import make_engine
    from lbm.engines.timestep import step_index
    from lbm.simulation import prepare

    cpu, dev = backends()
    _, setup = prepare(overrides)
    with jax.default_device(cpu):
        ref_engine = make_engine(setup, "instrumented", engine="xla")
        f = jax.device_put(setup.initial_populations(), cpu)
    with jax.default_device(dev):
        dev_engine = make_engine(setup, "instrumented", engine="xla")
    done = 0
    for n in at_steps:
        with jax.default_device(cpu):
            if n > done:
                f, _ = ref_engine.advance(f, n - done, first_step=done)
                done = n
            s = StepState(f=f, t=step_index(n))
        for name in setup.stages:
            with jax.default_device(cpu):
                out_ref = ref_engine._jitted[name](s, ref_engine.params)
            with jax.default_device(dev):
                out = dev_engine._jitted[name](jax.device_put(s, dev), dev_engine.params)
            parts = []
            for key in ("f", "drho", "u", "feq", "collided", "post", "force"):
                a, b = getattr(out, key), getattr(out_ref, key)
                if a is not None and b is not None:
                    rel, at = relative(a, b)
                    parts.append(f"{key} {rel:.2e} at {at}" if rel else f"{key} 0")
            print(f"stage step {n:5d} {name:>12s}: {'; '.join(parts)}", flush=True)
            if f"{name}@{n}" in dump:
                saved = {f"{side}_{key}": np.asarray(getattr(state, key)) for side, state in
                         (("in", s), ("cpu", out_ref), ("dev", out)) for key in ("f", "drho", "u", "post")
                         if getattr(state, key) is not None}
                dump_dir.mkdir(parents=True, exist_ok=True)
                np.savez_compressed(dump_dir / f"stage-{name}-{n}.npz", **saved)
            s = jax.device_put(out_ref, cpu)


def main(argv: list[str]) -> int:
    """Parse the command line and run both checks."""
    if "--" not in argv:
        print("backends_agree.py: give the configuration after --, e.g. -- case=cylinder", file=sys.stderr)
        return 2
    cut = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="1,10,100,1000")
    parser.add_argument("--stage-steps", default="0,500")
    parser.add_argument("--engine", default="xla")
    parser.add_argument("--dump", default="", help="stage@step,...: save that stage's input and outputs")
    parser.add_argument("--dump-dir", default=".", type=Path)
    parser.add_argument("--pair-2d-at-every-size", action="store_true",
                        help="the 2D in-place pair on small grids too (on a TPU it starts at 40 MiB of populations)")
    args = parser.parse_args(argv[:cut])
    if args.pair_2d_at_every_size:  # as tests/helpers/runs.py's pair_2d_at_every_size
        from lbm.engines.pallas import aa

        aa.AA2D_MIN_BYTES = 0
    overrides = [*argv[cut + 1:], "output.plots=false"]
    print(f"backends: {[str(d) for d in backends()]}; jax {jax.__version__}; {' '.join(overrides)}", flush=True)
    jnp.zeros(1).block_until_ready()
    check_stages(overrides, [int(x) for x in args.stage_steps.split(",") if x], set(filter(None, args.dump.split(","))),
                 args.dump_dir)
    check_steps(overrides, [int(x) for x in args.steps.split(",") if x], args.engine)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
