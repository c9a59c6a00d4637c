"""Which form of the inlet's unknowns XLA:TPU computes right: the inlet stage's input saved on the chip at step 500 of
the default cylinder (``scripts/backends_agree.py --dump inlet@500 --dump-dir DIR -- case=cylinder``), each form
jitted on the default backend and run op by op, against the same form jitted on the CPU.

  python scripts/tpu_inlet_forms.py DIR/stage-inlet-500.npz [HLO_OUT]

Prints per form the largest difference relative to the CPU's largest |value|; HLO_OUT gets the stock form's compiled
program. On the chip (jax 0.10.2, 2026-12-06, docs/tpu-v5e/2026-12-06/session5/): the stock form (a gather and a
scatter over index arrays) 1.4e-2 jitted and 1.4e-7 op by op; the same with feq behind an optimisation barrier
1.4e-2; from static slices ("stacked") 1.4e-7.
"""

from __future__ import annotations

import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries import inlet as inlet_rule
from lbm.kernels.equilibrium import equilibrium
from lbm.simulation import prepare


def main(argv: list[str]) -> int:
    """Run every form on both backends and print how far apart they are."""
    _, setup = prepare(["case=cylinder", "output.plots=false"])
    lat = setup.lattice
    inflow = next(b for b in setup.boundaries if b.stage == "inlet")
    saved = np.load(argv[0])
    f, drho, u = saved["in_f"], saved["in_drho"], saved["in_u"]
    feq = np.asarray(equilibrium(jnp.asarray(drho), jnp.asarray(u), lat))
    u_in = np.asarray(inflow.u)
    unknown = np.flatnonzero(lat.c[:, 0] > 0)
    opp = lat.opposite[unknown]

    def gathered(barrier: bool) -> Any:
        """The unknowns by a gather and a scatter over index arrays (the inlet's form until 2026-12-06), the
        equilibrium behind an optimisation barrier or not."""
        def form(f: jnp.ndarray) -> jnp.ndarray:
            f0 = f[:, 0]
            drho0 = inlet_rule.inlet_density(f0, u_in[0], lat)
            feq0 = equilibrium(drho0, u_in, lat)
            feq0 = jax.lax.optimization_barrier(feq0) if barrier else feq0
            return f.at[:, 0].set(f0.at[unknown].set(feq0[unknown] + f0[opp] - feq0[opp]))

        return form

    def stacked(f: jnp.ndarray) -> jnp.ndarray:
        return inlet_rule.inlet(f, jnp.asarray(drho), jnp.asarray(u), jnp.asarray(feq), u_in, lat, "nebb")[0]

    cpu, dev = jax.devices("cpu")[0], jax.devices()[0]
    for name, form in {"stock": gathered(False), "barrier": gathered(True), "stacked": stacked}.items():
        with jax.default_device(cpu):
            ref = np.asarray(jax.jit(form)(jax.device_put(f, cpu)))
        with jax.default_device(dev):
            jitted = np.asarray(jax.jit(form)(jax.device_put(f, dev)))
            with jax.disable_jit():
                eager = np.asarray(form(jax.device_put(jnp.asarray(f), dev)))
        scale = np.abs(ref).max()
        print(f"{name:>8s}: jitted {np.abs(jitted - ref).max() / scale:.2e}, op by op {np.abs(eager - ref).max() / scale:.2e}")
        if name == "stock" and len(argv) > 1:
            with jax.default_device(dev):
                text = jax.jit(form).lower(jax.device_put(f, dev)).compile().as_text()
            with open(argv[1], "w") as out:
                out.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
