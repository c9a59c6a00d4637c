"""The naive fused JAX step the speed-ups are measured against (issue 4's baseline).

Written the way a first JAX LBM usually is: moments by ``jnp.sum``/``tensordot``, the
equilibrium for all directions at once, BGK, streaming by one ``jnp.roll`` per direction,
the whole step in one jit, ``lax.fori_loop`` over steps, the state donated. Periodic box,
any lattice; no boundaries. It is deliberately independent of lbm.kernels so that it
stays a fixed reference while the engines change. Its populations are what every engine holds, the
deviations f - w from the rest state (lbm.kernels.equilibrium), so it steps the same initial state.

One choice is made for speed so that the baseline is not a straw man: c_i . u is formed by
broadcasting (``sum_a c_ia u_a``), not by ``tensordot(c, u)``; on XLA:CPU (jax 0.12) that
dot, contracted over only D axes, goes to a YNNPACK fusion and makes the whole step about
3x slower (1024^2: 15 against 49 MLUPS in one session).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from lbm.lattice import Lattice


def naive_step(f: jnp.ndarray, lattice: Lattice, omega: float) -> jnp.ndarray:
    """One BGK collide-and-stream step on a periodic box; ``f`` is ``(Q, *grid)``, deviations f - w."""
    c = jnp.asarray(lattice.c, f.dtype)
    w = jnp.asarray(lattice.w, f.dtype).reshape((-1,) + (1,) * lattice.d)
    drho = jnp.sum(f, axis=0)
    rho = 1.0 + drho
    u = jnp.tensordot(c.T, f, axes=1, precision=jax.lax.Precision.HIGHEST) / rho  # TPU: not bf16 passes
    cu = sum(c[:, a].reshape((-1,) + (1,) * lattice.d) * u[a] for a in range(lattice.d))
    usq = jnp.sum(u * u, axis=0)
    feq = w * (drho + rho * (3.0 * cu + 4.5 * cu * cu - 1.5 * usq))
    f = f - omega * (f - feq)
    axes = tuple(range(lattice.d))
    return jnp.stack([jnp.roll(f[i], tuple(int(s) for s in lattice.c[i]), axis=axes) for i in range(lattice.q)])


def naive_runner(lattice: Lattice, omega: float, steps: int) -> Callable[[jnp.ndarray], jnp.ndarray]:
    """A jitted function advancing ``f`` by ``steps`` naive steps (``lax.fori_loop``, ``f`` donated)."""

    def run(f: jnp.ndarray) -> jnp.ndarray:
        return jax.lax.fori_loop(0, steps, lambda _, g: naive_step(g, lattice, omega), f)

    return jax.jit(run, donate_argnums=0)

