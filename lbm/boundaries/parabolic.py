"""Boundary condition ``ParabolicBounceBack`` (stage ``bounce_back``): curved resting walls, exact for parabolic flow.

Linear Bouzidi–Firdaouss–Lallemand (lbm.boundaries.interpolated) puts the wall where the
interpolation says only for one value of TRT's Λ = Λ⁺Λ⁻ per wall fraction q, and its error also
depends on Λ⁺ (the viscosity) alone: the drag and Δp of the DFG cylinder move with Λ. This rule
is the central linear interpolation ("CLI") of Ginzburg, Verhaeghe & d'Humières (2008, Commun.
Comput. Phys. 3:427) with a post-collision correction that makes it exact for a steady parabolic
(Stokes) profile at any q, Λ⁺ and Λ⁻. For a wall link i from the fluid cell x_f (wall at the
fraction q of the link, ī the opposite direction, f* post-collision, f pre-collision):

    f_ī(x_f, t+1) = f*_i(x_f) + κ [f*_i(x_f - c_i) - f*_ī(x_f)] + (2q² E - (4 - 2ω⁻) m) / (1 + 2q),
    κ = (1 - 2q) / (1 + 2q),
    E = 2 [e⁻(x_f - c_i) / (1 + q) - e⁻(x_f) / q],   e⁻ = w_i ρ c_i·u / c_s²  (u as the collision sees it),
    m = (f_i - f_ī) / 2 - w_i c_i·j / c_s²  at x_f   (j = Σ_k c_k f_k).

Derivation (docs/dfg.md, "the wall location under TRT"): the steady TRT solution of Stokes flow with a linear
pressure and a parabolic velocity is, along a link, e⁻ = e₀ + E₁ s + E₂ s²/2, n⁺ = -(Λ⁺ + ½)(E₁ + E₂ s)
and n⁻ = (Λ⁻ + ½)(Λ⁺E₂ - P₁ + F) (P₁ = c_i·∇e⁺, F the Guo force term w_i c_i·F/c_s²; n = f - e,
e the equilibrium). Inserting it into CLI leaves the residual
[4Λ⁻(Λ⁺E₂ - P₁ + F) - 2q²E₂] / (1 + 2q) once e⁻ vanishes at the wall (e₀ + qE₁ + q²E₂/2 = 0); the
correction cancels it: E above is E₂ (the parabola through e⁻ at x_f - c_i, x_f and 0 at the wall;
E₂ = ω⁺[n⁺(x_f - c_i) - n⁺(x_f)] is exact too, but the rule built on it diverged at τ = 0.55), m is
n⁻ with the equilibrium of the unshifted momentum (= (Λ⁻ + ½)(Λ⁺E₂ - P₁ + F)), and
4Λ⁻/(Λ⁻ + ½) = 4 - 2ω⁻. q = 1/2 without correction is half-way bounce-back, which is exact at
Λ = 3/16 only; with it, every Λ. The error left is the equilibrium's O(u²) terms (compressibility).

Steady flow only: in unsteady flow the local n⁻ carries the memory of the slowly relaxed
antisymmetric modes (1/ω⁻ = Λ⁻ + ½ steps), and the correction built on it is wrong when Λ⁻ ≫ 1
(DFG 2D-2 at Λ⁻ = 12.5: cd_max 3.54 against 3.26 with linear BFL; docs/dfg.md, "the wall location under TRT").

Where x_f - c_i is not fluid (a gap one cell wide) the link falls back to half-way bounce-back.
The rule reads cells up to two links from the wall (x_f and x_f - c_i), like linear BFL, and
writes the solid cells (at rest) and the wall links' solid slots, from which streaming carries
the populations to x_f; :class:`lbm.boundaries.forces.Forces` over the same links gives the
momentum exchange with the corrected populations.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import BoundaryCondition, FormUnavailable, StepState, pytree_dataclass
from lbm.boundaries.interpolated import InterpolatedBounceBack, Intersect
from lbm.lattice import CS2, Lattice


def parabolic_weights(q: np.ndarray, far_is_fluid: np.ndarray, omega_minus: float) -> np.ndarray:
    """Per-link coefficients (4, n): κ of the interpolation, of e⁻(x_f - c_i), of e⁻(x_f) and of m."""
    q = np.asarray(q, np.float64)
    ok = np.asarray(far_is_fluid, bool)
    w = np.zeros((4, q.size))
    w[0] = np.where(ok, (1 - 2 * q) / (1 + 2 * q), 0.0)
    w[1] = np.where(ok, 4 * q**2 / ((1 + 2 * q) * (1 + q)), 0.0)
    w[2] = np.where(ok, -4 * q / (1 + 2 * q), 0.0)
    w[3] = np.where(ok, -(4 - 2 * omega_minus) / (1 + 2 * q), 0.0)
    return w


def parabolic_bounce_back(f: jnp.ndarray, post: jnp.ndarray, drho: jnp.ndarray, u: jnp.ndarray, solid: jnp.ndarray,
                          link_dir: jnp.ndarray, link_solid: jnp.ndarray, link_fluid: jnp.ndarray, link_far: jnp.ndarray,
                          weights: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Post-collision populations with solid cells at rest and the corrected CLI populations in the links' solid slots.

    Populations are deviations f - w (lbm.kernels.equilibrium): the rule adds to f*_i(x_f) only differences of
    populations of equal weight and terms of u, so it holds for them as it stands; ``drho`` is ρ - 1."""
    nq = post.shape[0]
    pre, out = f.reshape(nq, -1), post.reshape(nq, -1)
    rho, u = 1.0 + drho.reshape(-1), u.reshape(u.shape[0], -1)
    opp = jnp.asarray(lattice.opposite)[link_dir]
    w = weights.astype(post.dtype)
    c = jnp.asarray(lattice.c, post.dtype)
    ci, wi = c[link_dir].T, jnp.asarray(lattice.w, post.dtype)[link_dir]

    def anti_eq(cells: jnp.ndarray) -> jnp.ndarray:  # e⁻_i: w_i rho c_i.u / c_s² (u as the collision sees it)
        return wi * rho[cells] * jnp.sum(ci * u[:, cells], axis=0) / CS2

    momentum = jnp.einsum("qd,qn->dn", c, pre[:, link_fluid], precision=jax.lax.Precision.HIGHEST)  # TPU: not bf16
    m = 0.5 * (pre[link_dir, link_fluid] - pre[opp, link_fluid]) - wi * jnp.sum(ci * momentum, axis=0) / CS2
    values = (out[link_dir, link_fluid] + w[0] * (out[link_dir, link_far] - out[opp, link_fluid])
              + w[1] * anti_eq(link_far) + w[2] * anti_eq(link_fluid) + w[3] * m)
    rest = jnp.zeros((), post.dtype)
    return jnp.where(solid.reshape(1, -1), rest, out).at[opp, link_solid].set(values).reshape(post.shape)


@pytree_dataclass
class ParabolicBounceBack(InterpolatedBounceBack):
    """Central linear interpolation with the parabolic post-collision correction on a curved wall (see the module doc).

    The links, footprint and block form are linear BFL's; ``weights`` holds :func:`parabolic_weights`.
    """

    reads = (("f",), ("drho", "u"))

    @classmethod
    def like(cls, wall: InterpolatedBounceBack, omega_minus: float) -> ParabolicBounceBack:
        """The links and wall fractions of ``wall`` (linear BFL), for the antisymmetric relaxation rate ``omega_minus``."""
        far, fluid = np.asarray(wall.link_far), np.asarray(wall.link_fluid)
        return cls(solid=wall.solid, link_dir=wall.link_dir, link_solid=wall.link_solid, link_fluid=wall.link_fluid,
                   link_far=wall.link_far, weights=parabolic_weights(np.asarray(wall.q), far != fluid, omega_minus),
                   q=wall.q)

    def moved_to(self, intersect: Intersect, shape: tuple[int, ...], lattice: Lattice) -> BoundaryCondition:
        """FormUnavailable: the parabolic weights of traced wall fractions are not written (linear BFL's are)."""
        raise FormUnavailable(f"{type(self).__name__} has no traced wall fractions: use linear BFL "
                              "(lbm.boundaries.interpolated.InterpolatedBounceBack) for a shape gradient")

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Solid cells at rest, the wall links' populations interpolated and corrected."""
        return s.replace(post=parabolic_bounce_back(s.f, s.post, s.drho, s.u, self.solid, self.link_dir, self.link_solid,
                                                    self.link_fluid, self.link_far, self.weights, lattice))
